"""Findings from free text: negation, hedging, the past, call-taker questions, typos, ages and vitals."""

import pytest

from judgment.clinical import extract_findings, load_catalogue


@pytest.fixture(scope="module")
def catalogue():
    return load_catalogue()


def statuses(text, concept, catalogue):
    return extract_findings(text, catalogue).statuses(concept)


@pytest.mark.parametrize(
    ("text", "concept", "status"),
    [
        ("no fever, but she's been vomiting all night", "fever", "negated"),
        ("no fever, but she's been vomiting all night", "vomiting", "present"),
        ("he denies any chest pain", "chest_pain", "negated"),
        ("she didn't hit her head when she fell", "head_injury", "negated"),
        ("my dad had a stroke two years ago, now his knee is sore", "stroke_signs", "historical"),
        ("I think he might be having a seizure", "seizure", "possible"),
        ("the pain in his chest has gone now", "chest_pain", "resolved"),
        ("the bleeding has stopped now", "bleeding_controlled", "present"),
        ("I'm worried it's a heart attack", "cardiac_chest_pain", "hypothetical"),
    ],
)
def test_each_mention_gets_the_status_the_caller_gave_it(catalogue, text, concept, status):
    assert status in statuses(text, concept, catalogue)


def test_a_denied_normal_finding_is_its_opposite_and_a_hedged_one_possibly(catalogue):
    assert "present" in statuses("he isn't breathing", "apnoea", catalogue)
    assert "possible" in statuses("I don't think he's breathing", "apnoea", catalogue)
    assert "present" in statuses("she's not conscious", "unresponsive", catalogue)
    assert not statuses("he's breathing fine, just a bit shaken", "apnoea", catalogue)


def test_a_call_takers_question_counts_by_the_callers_answer(catalogue):
    assert "present" in statuses("Call-taker: Is he breathing? Caller: No, he's not", "apnoea", catalogue)
    assert not statuses("Call-taker: Is he breathing? Caller: Yes, he's breathing", "apnoea", catalogue)
    assert "negated" in statuses("Call-taker: Any chest pain? Caller: no", "chest_pain", catalogue)


def test_typos_and_dialect_still_match(catalogue):
    assert "present" in statuses("shes unconsious and isnae breathin", "unresponsive", catalogue)
    assert "present" in statuses("shes unconsious and isnae breathin", "apnoea", catalogue)
    assert "present" in statuses("he collased in the street", "collapse", catalogue)


@pytest.mark.parametrize(
    ("text", "age"),
    [("my husband is 67 and has chest pain", 67), ("my baby is 6 weeks old and very hot", 6 * 7 / 365),
     ("a man in his 70s has fallen", 75), ("I'm 8, my mummy fell down the stairs", 40)],
)
def test_the_patients_age_not_the_callers(catalogue, text, age):
    assert extract_findings(text, catalogue).patient.age == pytest.approx(age, abs=0.01)


def test_vitals_read_out_in_words_or_units_are_parsed(catalogue):
    vitals = extract_findings("sats are ninety one, pulse a hundred and ten, temp 103, sugar 2.1", catalogue).vitals
    assert (vitals.worst("spo2"), vitals.worst("heart_rate")) == (91, 110)
    assert vitals.worst("temperature_c") == pytest.approx(39.4)
    assert vitals.worst("glucose_mmol") == 2.1
