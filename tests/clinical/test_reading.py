"""How calls are read (spaCy and medspaCy): spelling only for non-words, negation that stops at the next clause,
resolution, one assertion per concept, answers to questions, quantities, and shorthand. The probes are those of
the urgency issue; none comes from an evaluation set."""

import json
from pathlib import Path

import pytest

from judgment.clinical import assess_call, extract_findings, extract_many, load_catalogue
from judgment.clinical.assertion import CURRENT, PRESENT, RESOLVED
from judgment.predictors.predictor import describe_findings

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def catalogue():
    return load_catalogue()


def status(text, concept, catalogue):
    found = extract_findings(text, catalogue).statuses(concept)
    assert len(found) <= 1
    return next(iter(found), None)


def test_a_real_word_is_never_corrected_into_a_finding(catalogue):
    findings, result = assess_call("he stubbed his toe", catalogue)
    assert status("he stubbed his toe", "penetrating_injury", catalogue) is None
    assert result.decision_point not in ("A", "B")
    assert not any(f.corrected for f in findings.items)


def test_a_corrected_non_word_supports_a_finding_but_never_decides_a_or_b(catalogue):
    findings, result = assess_call("he was stabed in the leg", catalogue)
    stab = next(f for f in findings.items if f.concept == "penetrating_injury")
    assert (stab.status, stab.corrected) == (PRESENT, True)
    assert result.decision_point not in ("A", "B")
    assert result.corrected_only  # the judgement marks the call uncertain and says why


def test_a_bleed_that_has_stopped_is_resolved_not_uncontrolled(catalogue):
    text = "there was a lot of blood from his hand but it has stopped now with a towel pressed on it"
    findings, result = assess_call(text, catalogue)
    assert status(text, "massive_bleeding", catalogue) == RESOLVED
    assert status(text, "bleeding_stopped", catalogue) == PRESENT
    assert "heavy, uncontrolled bleeding" not in describe_findings(findings, catalogue)
    assert result.level is None or result.level >= 3


def test_a_negation_stops_at_the_next_clause(catalogue):
    text = "bee sting on his arm, it is red, his throat is not swollen and his breathing is fine"
    findings, result = assess_call(text, catalogue)
    assert status(text, "breathing_ok", catalogue) == PRESENT
    assert status(text, "apnoea", catalogue) is None
    assert result.level != 1
    shown = describe_findings(extract_findings("my knee hurts, my breathing is normal", catalogue), catalogue)
    assert "breathing normally" in shown and "not breathing" not in shown


def test_a_toddlers_fall_from_a_balcony_is_high_risk_by_its_height(catalogue):
    text = ("my 18 month old climbed onto the balcony and fell to the patio below, one floor, he cried at once and "
            "now seems fine")
    findings, result = assess_call(text, catalogue)
    assert findings.vitals.worst("fall_height_m") == pytest.approx(3.0)
    assert (result.level, result.decision_point) == (2, "B")
    assert "fall from more than twice the patient's height" in [r.text for r in result.reasons]


@pytest.mark.parametrize(
    ("text", "level", "reason"),
    [
        ("police officer here, we have CPR in progress on a male in his sixties at the bus station", 1,
         "not breathing or no pulse"),
        ("this is the nurse at Elm Lodge, resident has a 30 percent burn to the torso from a kettle", 2,
         "burns over 10% of the body or more"),
        ("he fell about ten feet off a ladder and landed on his feet, he cannot walk, back pain", 2,
         "fall from 3 metres (10 feet, a storey) or more"),
        ("crew on scene, male found in the street, GCS 7, breathing", 1, "GCS 8 or less: cannot protect the airway"),
    ],
)
def test_professional_shorthand_and_quantities_are_read(catalogue, text, level, reason):
    _, result = assess_call(text, catalogue)
    assert result.level == level
    assert reason in [r.text for r in result.reasons]


def test_a_denial_of_the_past_is_not_a_denial_now(catalogue):
    text = "my husband just passed out for a few seconds, he's talking now. He's never fainted before."
    assert status(text, "syncope", catalogue) in (PRESENT, RESOLVED)


def test_the_answer_to_a_question_goes_to_what_it_asked(catalogue):
    noise = "Call-taker: Is she making a high-pitched noise when she breathes in? Caller: No, only when she coughs."
    assert status(noise, "stridor", catalogue) == "negated"
    assert status(noise, "apnoea", catalogue) is None
    two = "Call-taker: Is she breathing normally, any swelling of the face? Caller: No."
    assert status(two, "apnoea", catalogue) is None  # the "no" may be to the swelling
    assert status("Call-taker: Does he respond if you shout? Caller: No. Nothing.", "unresponsive", catalogue) == PRESENT
    moth = "There's a moth stuck in my ear and I can hear it flapping, where do I go?"
    assert status(moth, "object_in_ear_nose", catalogue) == PRESENT


def test_the_caller_being_family_does_not_make_the_finding_someone_elses(catalogue):
    # medspaCy's default FAMILY rule marks any family word; context.yaml leaves it out for calls
    assert status("me son fell off the monkey bars at school, he's eight", "fall", catalogue) == PRESENT
    assert status("my dad had chest pain last year, now his knee is sore", "chest_pain", catalogue) != PRESENT


def _evaluation_calls():
    for path in sorted((REPO / "fixtures" / "evaluation").glob("*/*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                yield json.loads(line)["transcript"]


def test_no_evaluation_call_yields_contradicting_assertions(catalogue):
    """One assertion per concept, and no finding current beside its opposite or resolver stated after it."""
    calls = list(_evaluation_calls())
    assert len(calls) >= 1000
    opposites = {c.id: c.opposite for c in catalogue.concepts.values() if c.opposite}
    for text, findings in zip(calls, extract_many(calls, catalogue), strict=True):
        concepts = [f.concept for f in findings.items]
        assert len(concepts) == len(set(concepts)), text
        by_concept = {f.concept: f for f in findings.items}
        for normal, opposite in opposites.items():
            ok, bad = by_concept.get(normal), by_concept.get(opposite)
            if ok and bad and ok.status == PRESENT and not ok.derived and bad.status in CURRENT:
                bare_word = len(ok.words.split()) < 2  # "breathing" names the state; it resolves nothing
                assert bare_word or (ok.start is not None and bad.start is not None and ok.start <= bad.start), text


def test_the_findings_score_counts_asserted_findings_and_assertions_against_the_annotation(catalogue):
    from training.findings_evaluation import score_findings

    mapping = {"not_breathing": ("apnoea",), "breathing_normally": ("breathing_ok",), "chest_pain": ("chest_pain",)}
    records = [{"transcript": "he's not breathing, no chest pain", "findings": {
        "not_breathing": "present", "chest_pain": "negated"}},
        {"transcript": "my chest hurts", "findings": {"chest_pain": "resolved"}}]
    def read(text):
        return [(f.concept, f.status) for f in extract_findings(text, catalogue).items]
    score = score_findings(records, read, mapping, catalogue)
    # asserted: apnoea (right), chest pain in call 2 (the annotator says resolved: a false positive)
    assert (score["precision"], score["recall"]) == (0.5, 1.0)
    assert score["assertion_accuracy"] == pytest.approx(2 / 3)
    assert score["calls_with_contradictions"] == 0


@pytest.mark.parametrize(
    ("text", "level"),
    [
        ("he stubbed his toe", 5),
        ("bee sting on his arm, it is red, his throat is not swollen and his breathing is fine", 5),
        ("he banged his shin on the table, it's a bit bruised, his breathing is okay and he's walking about", 5),
        ("there was a lot of blood from his hand but it has stopped now with a towel pressed on it", 4),
    ],
)
def test_the_rules_put_the_minor_probes_within_one_level_of_the_handbook(catalogue, text, level):
    _, result = assess_call(text, catalogue)
    assert result.level is None or abs(result.level - level) <= 1
    assert result.decision_point not in ("A", "B")


# Readings fixed from the development findings set's error analysis (2026-11-29); each probe is our own wording.
@pytest.mark.parametrize(("text", "concept", "expected"), [
    # a safety net the call-taker gives is about what might happen, across its commas
    ("Call-taker: If he gets sleepy or sweaty, or it could be a low sugar, call us straight back.", "hypoglycaemia",
     "hypothetical"),
    ("Call-taker: If he gets sleepy or sweaty, or it could be a low sugar, call us straight back.", "clammy",
     "hypothetical"),
    # a worry or a plan asked as a question is not a question about now
    ("He has a chest infection. What if he stops breathing in the night?", "apnoea", "hypothetical"),
    ("Should we start CPR?", "cpr_in_progress", "hypothetical"),
    # a hedged answer is possible
    ("Call-taker: Is she breathing? Caller: I think so, her lips look a bit blue.", "breathing_ok", "possible"),
    # the caller's own relative, when the caller is the patient
    ("I'm 52 and I've had chest tightness for an hour. My dad had a heart attack at 50.", "heart_disease",
     "other_person"),
    # a brief loss of consciousness from an injury, over once the patient is awake again
    ("He hit his head on the kerb and was out cold for about a minute, now he's awake and talking.",
     "loss_of_consciousness_after_injury", "resolved"),
    ("She's very drowsy, it's hard to keep her awake.", "lethargy", "present"),
    ("She's very drowsy, it's hard to keep her awake.", "alert", None),
    ("She's breathing really fast and deep and she's drowsy.", "dyspnoea", "present"),
    ("She's breathing really fast and deep and she's drowsy.", "breathing_ok", None),
    # "a fit" as an adjective is no seizure; as a noun it is
    ("He's a fit lad, he went over on his ankle at football.", "seizure", None),
    ("I think it was a fit, she went stiff and shook all over.", "seizure", "possible"),
    # a substance named is not an ingestion
    ("I got some bleach splashed in my eye cleaning, I didn't swallow any.", "overdose", None),
    ("I got some bleach splashed in my eye cleaning, I didn't swallow any.", "dangerous_substance", "present"),
    ("My son touched the iron, a small burn on his finger.", "dangerous_substance", None),
    ("She's taken like 20 paracetamol about an hour ago.", "overdose", "present"),
])
def test_situations_are_read_by_their_meaning(catalogue, text, concept, expected):
    assert status(text, concept, catalogue) == expected


# Readings fixed from the error analysis of the second pair of development findings files (findings-dev-3 and -4,
# written 2026-11-29 and first measured before any change); each probe is our own wording.
@pytest.mark.parametrize(("text", "concept", "expected"), [
    # "it's stopped" ends the problem told before it, not a normal state, nor something that never bled
    ("She had a fit at the bus stop, it lasted about a minute and it's stopped now.", "seizure", "resolved"),
    ("She had a fit at the bus stop, it lasted about a minute and it's stopped now.", "bleeding_stopped", None),
    ("He's not bleeding, his eye is swollen shut.", "bleeding_stopped", None),
    ("He's not bleeding, his eye is swollen shut.", "bleeding", "negated"),
    # an answer relayed by an interpreter or hedged, a filler before it, "a bit" as a yes
    ("Call-taker: Does he have a temperature? Caller: She says no, no temperature.", "fever", "negated"),
    ("Call-taker: Could she be pregnant? Caller: She says definitely not.", "pregnant", "negated"),
    ("Call-taker: Any pain in his tummy? Caller: A bit, low down.", "abdominal_pain", "present"),
    ("Call-taker: Is he breathing? Caller: Um, no.", "breathing_ok", "negated"),
    # yes to a question of two things joined by "and" says both; an answer after two questions answers the last
    ("Call-taker: Is she awake and talking to you? Caller: Yes, she's crying.", "alert", "present"),
    ("Call-taker: Is he breathing okay? Any chest pain? Caller: No.", "breathing_ok", "question"),
    # a question that is a list of words asks of each
    ("Call-taker: Sweaty, clammy? Caller: No, not at all.", "clammy", "negated"),
    # a finding stated denies its normal state
    ("Call-taker: Is he breathing? Caller: I don't know... he's not breathing.", "breathing_ok", "negated"),
    # "unless" is a condition; a conditional outranks the negation inside it
    ("Call-taker: Don't move her unless she stops breathing.", "apnoea", "hypothetical"),
    ("Call-taker: If she doesn't wake up properly, ring us back.", "unresponsive", "hypothetical"),
    # naming the glass test is no result; a rash that fades under it is reassuring
    ("There's a rash on his legs, I did the glass test and it fades when I press.", "non_blanching_rash", None),
    ("There's a rash on his legs, I did the glass test and it fades when I press.", "blanching_rash", "present"),
    ("There's a rash on his legs that doesn't fade when I press a glass on it.", "non_blanching_rash", "present"),
    # last time, normally: the past and the patient's baseline
    ("Her waters haven't gone. Last time she had heavy bleeding after the birth.", "massive_bleeding",
     "historical"),
    ("Her waters haven't gone. Last time she had heavy bleeding after the birth.", "waters_broken", "negated"),
    ("She's off her legs today, normally she's up and about with her frame.", "walking_ok", "historical"),
    # words that were read as other findings
    ("She's 80, confused since this morning, and she says her wee burns.", "burn", None),
    ("She's 80, confused since this morning, and she says her wee burns.", "urinary_symptoms", "present"),
    ("He's really floppy and keeps falling asleep on me.", "fall", None),
    ("I've got a pain under my ribs on the right since I ate.", "chest_pain", None),
    ("I've got a pain under my ribs on the right since I ate.", "abdominal_pain", "present"),
    ("He's walking but bent over with the pain.", "deformity", None),
    ("Stung on the arm, it's red and itchy, no hives anywhere.", "rash", "negated"),
    ("My girlfriend's having a reaction, her lips are swelling.", "allergic_reaction", "present"),
    ("I've been having thoughts about not wanting to be alive.", "suicidal", "present"),
    ("Reckon his sugar's low, he's shaky.", "hypoglycaemia", "possible"),
])
def test_readings_from_the_second_development_pair(catalogue, text, concept, expected):
    assert status(text, concept, catalogue) == expected


def test_concern_for_a_person_does_not_make_their_overdose_a_worry(catalogue):
    text = "I'm worried about my friend, she took 30 tablets of her antidepressants an hour ago."
    assert status(text, "overdose", catalogue) == PRESENT


def test_what_a_relative_says_of_the_calling_patient_stays_the_patients(catalogue):
    text = "I've been feeling faint all morning and my wife says my lips are blue."
    assert status(text, "cyanosis", catalogue) in CURRENT
