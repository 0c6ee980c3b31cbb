"""Who the patient is, from what the caller says: age (years), age group, sex. Pure functions, O(length).

The age is the patient's, not the caller's: "I'm 8, my mummy's fallen" gives the caller's age, so a
first-person age counts only when the caller is the patient. Without a stated age, words give a group
("my baby", "my little boy", "my nan"); without those, an adult, as the labelling guide says.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Representative ages for a group when no number is given; rules compare ages, not group names.
GROUP_AGE = {"neonate": 0.04, "infant": 0.5, "toddler": 2.0, "child": 7.0, "teen": 15.0, "adult": 40.0,
             "elderly": 80.0}
_UNIT_YEARS = {"day": 1 / 365, "week": 7 / 365, "month": 1 / 12, "year": 1.0}
_NOT_AN_AGE_AFTER = (
    r"(?! ?(?:minutes|hours|seconds|weeks|days|months|percent|%|bpm|over|out|times|stone|pounds|kg|lbs|degrees|mg|"
    r"ml|units|per|miles|feet|metres|meters|foot|ft|floors|steps|mmol|c|f|/|\.\d|:|am|pm|o'clock)\b)"
)
_AGE = re.compile(
    r"\b(\d{1,3}(?:\.\d)?) ?(day|week|month|year)s?[ -]?old\b"
    r"|\b(\d{1,3}) ?(?:years old|years of age|yr old)\b"
    r"|\baged? (\d{1,3})\b"
    r"|\b(\d{1,3}) ?(?:m|f|male|female)\b(?! ?(?:min|mg|ml|%))"
    r"|\b(\d{1,3})-year-old\b"
    r"|\bin (?:his|her|their) (?:early |mid |late |mid-|late-|early-)?(\d0) ?s\b"
    r"|\bin (?:his|her|their) (?:early |mid |late )?(twenties|thirties|forties|fifties|sixties|seventies|eighties|nineties)\b"
    r"|\b(?!(?:temp|temperature|pulse|sugar|sugars|sats|oxygen|pressure|rate|reading|it|that|this|score|level|number|"
    r"count|bp|glucose|heart|breathing|weight|dose|there|which|what|time|address|flat|house|room)\b)[a-z']+ (?:is|'s) "
    r"(\d{1,3})(?: years)?\b" + _NOT_AN_AGE_AFTER
)
_SUBJECT_IS = re.compile(r"\b([a-z']+)'s (\d{1,3})\b" + _NOT_AN_AGE_AFTER)  # "she's 4", "he's 80"
_FIRST_PERSON_AGE = re.compile(r"\bi(?: am|'m) (\d{1,3})(?: years old)?\b" + _NOT_AN_AGE_AFTER)
_DECADES = {"twenties": 25, "thirties": 35, "forties": 45, "fifties": 55, "sixties": 65, "seventies": 75,
            "eighties": 85, "nineties": 95}
_GROUP_WORDS = [
    ("neonate", r"\b(?:newborn|new-born|new born|neonate|just (?:been )?born|born (?:this morning|today|yesterday|"
                r"last night|(?:\d+|a few) (?:days?|hours?) ago))\b"),
    ("infant", r"\b(?:baby|babies|infant|bub|bubba)\b"),
    ("toddler", r"\b(?:toddler)\b"),
    ("child", r"\b(?:little (?:boy|girl|one|lad|un)|my (?:son|daughter|boy|girl|kid|child)|kid|child|"
              r"grandson|granddaughter|schoolboy|schoolgirl|pupil|student in year \d)\b"),
    ("teen", r"\b(?:teen|teenager|teenage|adolescent)\b"),
    ("elderly", r"\b(?:elderly|old (?:man|woman|lady|gentleman|fella|boy)|pensioner|nan|nana|nanna|gran|granny|"
                r"grandma|grandmother|grandad|granddad|grandpa|grandfather|(?:care|nursing|rest|old people's) home|"
                r"resident|great[- ]grand\w*|frail)\b"),
]
# Words that say the patient is an adult, though they give no age: the guidance then reads adult technique.
_ADULT_WORDS = re.compile(r"\b(?:husband|wife|(?:grown|adult) (?:son|daughter)|man|woman|lady|gentleman|bloke|guy|"
                          r"colleague|boyfriend|girlfriend|flatmate|roommate|dad|father|mum|mom|mother|uncle|aunt|"
                          r"neighbou?r|pregnant)\b")
_SON_DAUGHTER_ADULT = re.compile(r"\bmy (?:son|daughter)\b")
_THIRD_PARTY = re.compile(
    r"\b(?:my|our|the|a|this|his|her) (?:husband|wife|partner|mum|mom|mother|dad|father|son|daughter|brother|sister|"
    r"baby|child|kid|friend|mummy|mommy|daddy|mama|papa|grandmother|grandfather|boyfriend|girlfriend|nan|gran|granny|grandma|grandad|grandpa|uncle|aunt|auntie|"
    r"neighbou?r|colleague|resident|patient|man|woman|lady|guy|bloke|boy|girl|teenager|student|pupil|customer|"
    r"client|tenant|cousin|niece|nephew|flatmate|roommate|housemate|carer|driver|cyclist|passenger|worker)\b"
    r"|\b(?:someone|somebody|a person|this person)\b"
)
_FIRST_PERSON_SYMPTOM = re.compile(
    r"\bi(?:'ve| have) (?:been|got|had)\b|\bi (?:feel|felt|fainted|fell|can't|cannot|get|keep|woke)\b|\bi'm (?:having|getting|feeling|in)\b"
    r"|\bmy (?:chest|head|stomach|tummy|belly|back|arm|leg|foot|ankle|knee|hand|wrist|eye|throat|heart|breathing|pain)\b"
)
_FEMALE = re.compile(r"\b(?:she|her|hers|herself|woman|lady|girl|mum|mom|mother|wife|daughter|sister|nan|gran|"
                     r"granny|grandma|aunt|auntie|niece|girlfriend|pregnant|mrs|ms|miss|female|mummy|mommy|mama)\b")
_MALE = re.compile(r"\b(?:he|him|his|himself|man|guy|bloke|boy|lad|dad|father|husband|son|brother|grandad|grandpa|"
                   r"uncle|nephew|boyfriend|mr|male|daddy|papa)\b")


@dataclass(frozen=True)
class Patient:
    age_years: float | None  # stated, or None
    age_group: str  # neonate | infant | toddler | child | teen | adult | elderly
    sex: str  # female | male | unknown
    caller_is_patient: bool
    age_known: bool = True  # an age or an age group was said ("my baby", "my nan"); else an adult is assumed

    @property
    def age(self) -> float:
        """The age rules compare: the stated one, else the group's representative age."""
        return self.age_years if self.age_years is not None else GROUP_AGE[self.age_group]


def describe_patient(text: str) -> Patient:
    """``text``: the normalised call (lower case, digits for number words)."""
    # The patient is the caller when the call talks about "I" and "me" more than about "he" or "she".
    first = len(re.findall(r"\b(?:i|i'm|i've|i'd|me|myself)\b", text))
    third = len(re.findall(r"\b(?:he|she|he's|she's|him|her|his|hers|himself|herself)\b", text))
    caller_is_patient = first > third and (not _THIRD_PARTY.search(text) or bool(_FIRST_PERSON_SYMPTOM.search(text)))
    age = _stated_age(text, caller_is_patient)
    group = _group(age, text)
    known = age is not None or group != "adult" or bool(_ADULT_WORDS.search(text)) or caller_is_patient
    return Patient(age, group, _sex(text, caller_is_patient), caller_is_patient, known)


def _stated_age(text: str, caller_is_patient: bool) -> float | None:
    match = _AGE.search(text)
    if match:
        groups = match.groups()
        if groups[0] is not None:
            return round(float(groups[0]) * _UNIT_YEARS[groups[1]], 3)
        for value in groups[2:6]:
            if value is not None:
                return float(value)
        if groups[6] is not None:
            return float(groups[6]) + 5  # "in his 70s"
        if groups[7] is not None:
            return float(_DECADES[groups[7]])
        if groups[8] is not None:
            return float(groups[8])
    subject = _SUBJECT_IS.search(text)
    if subject and subject.group(1) in ("he", "she", "they", "baby", "son", "daughter", "boy", "girl", "it"):
        return float(subject.group(2))
    if caller_is_patient:
        first = _FIRST_PERSON_AGE.search(text)
        if first:
            return float(first.group(1))
    return None


def _group(age: float | None, text: str) -> str:
    if age is not None:
        if age < 28 / 365:
            return "neonate"
        if age < 1:
            return "infant"
        if age < 3:
            return "toddler"
        if age < 13:
            return "child"
        if age < 18:
            return "teen"
        return "elderly" if age >= 65 else "adult"
    for group, pattern in _GROUP_WORDS:
        if re.search(pattern, text):
            if group == "child" and _SON_DAUGHTER_ADULT.search(text) and not re.search(
                r"\b(?:little|baby|kid|child|school|nursery|toddler)\b", text
            ):
                continue  # "my son" is as often an adult: without a child word, no group from it
            return group
    return "adult"


def _sex(text: str, caller_is_patient: bool) -> str:
    if caller_is_patient:
        if re.search(r"\bpregnant\b|\bmy (?:period|periods|womb|ovary|ovaries|breast)\b", text):
            return "female"
        if re.search(r"\bmy (?:testicle|testicles|balls|scrotum|prostate)\b", text):
            return "male"
        return "unknown"
    female, male = len(_FEMALE.findall(text)), len(_MALE.findall(text))
    if female > male:
        return "female"
    if male > female:
        return "male"
    return "unknown"
