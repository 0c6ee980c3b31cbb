"""The ESI algorithm over the catalogue: each decision point, and danger-zone vitals that depend on age."""

import pytest

from judgment.clinical import assess_call, load_catalogue


@pytest.fixture(scope="module")
def catalogue():
    return load_catalogue()


def verdict(text, catalogue):
    _, result = assess_call(text, catalogue)
    return result


@pytest.mark.parametrize(
    ("text", "level", "point", "reason"),
    [
        ("My husband collapsed, he's not breathing and I can't feel a pulse", 1, "A", "A: not breathing or no pulse"),
        ("She's still fitting, it's been going on for ten minutes", 1, "A", "A: seizure still going on"),
        ("he's on chemo for his lymphoma and tonight he's got a fever and the shivers", 2, "B",
         "B: fever in an immunosuppressed patient (chemotherapy, transplant, steroids)"),
        ("my mum's suddenly confused, she doesn't know where she is", 2, "B", "B: new confusion or disorientation"),
        ("I've had stomach pain since this morning, I'm 30, it's a dull ache low on the right", 3, "C",
         "C: 2 resources (labs, CT/ultrasound) for abdominal pain"),
        ("I twisted my ankle playing football and I can't put any weight on it", 4, "C",
         "C: 1 resource (X-ray) for a limb injury needing an X-ray"),
        ("I ran out of my blood pressure tablets and the pharmacy is shut", 5, "C",
         "C: no resources (a medication question)"),
    ],
)
def test_each_decision_point_decides_with_its_reason(catalogue, text, level, point, reason):
    result = verdict(text, catalogue)
    assert (result.level, result.decision_point) == (level, point)
    assert reason in [str(r) for r in result.reasons]


def test_a_calm_caller_with_a_dangerous_condition_is_still_esi_2(catalogue):
    result = verdict("Sorry to bother you, it's probably nothing. I'm 58 and I've had this crushing pressure in my "
                     "chest for an hour, it goes into my left arm", catalogue)
    assert (result.level, result.decision_point) == (2, "B")


def test_a_denied_danger_sign_does_not_raise_the_level(catalogue):
    result = verdict("I twisted my ankle, I can't put weight on it. No, I didn't hit my head and I'm not on blood "
                     "thinners, no numbness", catalogue)
    assert result.level == 4


def test_danger_zone_vitals_decide_d_only_for_a_patient_needing_two_resources(catalogue):
    abdominal = verdict("I'm 40 and I've got stomach pain, my watch says my heart rate is 130", catalogue)
    assert (abdominal.level, abdominal.decision_point) == (2, "D")
    assert any("heart rate 130" in str(r) for r in abdominal.reasons)
    ankle = verdict("I twisted my ankle and can't put weight on it, my pulse is 110 because I'm panicking", catalogue)
    assert ankle.level == 4  # one resource: D is not consulted


@pytest.mark.parametrize(
    ("age_words", "heart_rate", "danger"),
    [("my son, he's 2,", 150, False), ("my husband, he's 40,", 150, True),
     ("my baby, she's 2 months old,", 170, False), ("my daughter, she's 5,", 150, True)],
)
def test_the_heart_rate_danger_zone_follows_the_patients_age(catalogue, age_words, heart_rate, danger):
    result = verdict(f"{age_words} has a tummy ache and the monitor says heart rate {heart_rate}", catalogue)
    assert bool(result.danger_zone) is danger


def test_oxygen_saturation_below_92_is_in_the_danger_zone_at_any_age(catalogue):
    result = verdict("she's had a cough and fever for three days, the finger monitor says sats 90", catalogue)
    assert any(r.point == "D" and "SpO2 90%" in r.text for r in result.danger_zone)
