"""Vital signs, pain scores and other quantities read out by callers ("sats 88", "pulse is 130", "sugar's 2.1",
"temp 103", "it's 90 over 50", "pain's 9 out of 10", "GCS 8", "fell about ten feet", "one floor", "a 30 percent
burn"), in standard units. Pure functions of the normalised text, O(length).

A sentence embedding barely tells "sats 85" from "sats 97", nor a fall of one floor from one of one step;
decision points B and D need the number.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_N = r"(\d{1,3}(?:\.\d)?)"
_GAP = r"(?: (?!\d)[^ .!?;,\n]+){0,5} "  # up to five words that are not numbers, then the reading
_OX_WORDS = r"(?:sats?|saturations?|sat level|oxygen(?: level| sat\w*| reading)?|spo2|pulse ?ox\w*|oximeter|o2 sat\w*)"

_SPO2_GAP = r"(?: (?!\d)[^ .!?;,\n]+){0,8} "  # "oxygen thing from the chemist and it's reading 90"
_SPO2 = re.compile(rf"\b{_OX_WORDS}(?: (?:is|was|are|were|says|reads|of|at|showing|shows|'s|only|just|about|around|"
                   rf"down to|dropped to|dropping to|keeps|saying|reading|like))*(?:{_SPO2_GAP})?{_N} ?(?:%|percent)?")
_HEART = re.compile(
    rf"\b(?:heart ?rate|pulse(?! ?ox)|heart ?beat|heart(?:'s| is)? (?:going|racing|beating|pounding|doing)(?: at)?|"
    rf"hr|bpm(?: is)?|watch says (?:his|her|my) heart)(?:{_GAP}| ){_N}\b"
    rf"|\b{_N} ?(?:bpm|beats (?:a|per) minute|beats a min)\b"
)
_RESP = re.compile(
    rf"\b(?:breathing|breaths|resp\w*(?: rate)?|breathing rate)(?:{_GAP}| ){_N} ?(?:times |breaths )?(?:a|per|/|an?) ?min"
    rf"|\b{_N} breaths\b"
)
_TEMP = re.compile(
    rf"\b(?:temp\w*|fever(?: of)?|thermometer(?: says| reads| reading)?|running)(?:{_GAP}| ){_N} ?(?:degrees|°)? ?([cf])?\b"
    rf"|\b{_N} ?(?:degrees|°) ?([cf])?\b"
)
_SUGAR = re.compile(rf"\b(?:sugars?|glucose|bm|blood sugar|meter|glucometer|libre|dexcom)(?:{_GAP}| ){_N}\b")
_PRESSURE = re.compile(r"\b(\d{2,3}) ?(?:over|/) ?(\d{2,3})\b")
_GCS = re.compile(r"\b(?:gcs|glasgow coma scale|glasgow)(?: (?:is|was|of|at|score|down to))* (\d{1,2})\b")
_BURN = re.compile(r"\b(\d{1,2}) ?(?:%|percent|per cent)(?: of (?:his|her|their|the|my) (?:body|skin))?(?: (?:burns?|burned|burnt|scalds?|tbsa|full thickness|partial thickness))"
                   r"|\b(?:burns?|scalds?) (?:to|over|on|covering) (?:about |around |roughly )?(\d{1,2}) ?(?:%|percent|per cent)")
_FALL_WORD = r"(?:fell|fall|fallen|falling|jumped|came off|come off|dropped|tumbled|slipped)"
_FALL_HEIGHT = re.compile(
    _FALL_WORD + r"(?: (?![.!?;,\n])\S+){0,6}? (?:about |around |roughly |nearly |almost |over |at least |maybe |like |a good )?"
    r"(\d{1,3}(?:\.\d)?) ?(feet|foot|ft|metres|meters|metre|meter|m|floors|floor|storeys|storey|stories|story)\b"
    r"|(\d{1,3}(?:\.\d)?) ?(feet|foot|ft|metres|meters|metre|meter|m|floors|floor|storeys|storey|stories|story)"
    r"(?: (?![.!?;,\n])\S+){0,4}? " + _FALL_WORD)
_FALL_PLACE = re.compile(
    _FALL_WORD + r"(?: (?![.!?;,\n])\S+){0,8}? (?:the |a |his |her |their |my )?(?:(first|1st|second|2nd|third|3rd)[ -]floor |upstairs )?"
    r"(balcony|window|roof|top bunk|bunk bed|loft|hayloft|scaffolding|cliff|bridge)\b")
_PLACE_BEFORE = re.compile(
    r"\b(balcony|window|roof|top bunk|bunk bed|loft|hayloft|scaffolding|cliff|bridge)(?: (?![.!?;\n])\S+){0,5}? " + _FALL_WORD)
_STOREYS = re.compile(r"\b(\d{1,2}|one|a|two|three|four) (?:floors?|storeys?|stor(?:y|ies))(?: (?:down|up|high|below))?\b")
_FLOOR_M = 3.0  # a storey, as field triage counts it (CDC 2021: "falls from > 10 feet (one story)")
_PLACE_M = {"balcony": 3.0, "window": 3.0, "roof": 3.0, "top bunk": 1.5, "bunk bed": 1.5, "loft": 3.0,
            "hayloft": 3.0, "scaffolding": 3.0, "cliff": 6.0, "bridge": 6.0}
_PAIN = re.compile(r"\b(\d{1,2}(?:\.\d)?) ?(?:out of|/) ?10\b|\b(?:pain|it)(?:'s| is)? (?:a |an )?(\d{1,2}) (?:out of )?10\b")


@dataclass(frozen=True)
class Vitals:
    heart_rate: tuple[float, ...] = ()
    resp_rate: tuple[float, ...] = ()
    spo2: tuple[float, ...] = ()
    temperature_c: tuple[float, ...] = ()
    glucose_mmol: tuple[float, ...] = ()
    systolic_bp: tuple[float, ...] = ()
    pain_score: tuple[float, ...] = ()
    gcs: tuple[float, ...] = ()
    burn_percent: tuple[float, ...] = ()  # of the body's surface
    fall_height_m: tuple[float, ...] = ()
    quoted: bool = False

    def worst(self, name: str) -> float | None:
        """The most alarming value of a vital: the lowest saturation, pressure or sugar, the highest rate,
        temperature or pain. (For sugar both ends alarm: ``lowest``/``highest`` name them.)"""
        values = getattr(self, name)
        if not values:
            return None
        return min(values) if name in ("spo2", "systolic_bp", "glucose_mmol", "gcs") else max(values)

    def highest(self, name: str) -> float | None:
        values = getattr(self, name)
        return max(values) if values else None


def read_vitals(text: str) -> Vitals:
    """``text``: the normalised call."""
    spo2 = [v for v in _numbers(_SPO2, text) if 50 <= v <= 100]
    heart = [v for v in _numbers(_HEART, text) if 20 <= v <= 260 and v not in spo2]
    resp = [v for v in _numbers(_RESP, text) if 3 <= v <= 90]
    temps = [_celsius(v, unit) for v, unit in _temperatures(text)]
    temps = [t for t in temps if t is not None]
    sugar = [_mmol(v) for v in _numbers(_SUGAR, text) if 0.5 <= v <= 900]
    pressure = [float(s) for s, d in _PRESSURE.findall(text) if 50 <= int(s) <= 260 and 20 <= int(d) <= 160
                and int(s) > int(d)]
    pain = [v for v in _numbers(_PAIN, text) if 0 <= v <= 10]
    gcs = [v for v in _numbers(_GCS, text) if 3 <= v <= 15]
    burn = [v for v in _numbers(_BURN, text) if 1 <= v <= 100]
    quoted = bool(spo2 or heart or resp or temps or sugar or pressure or gcs)
    return Vitals(tuple(heart), tuple(resp), tuple(spo2), tuple(temps), tuple(sugar), tuple(pressure), tuple(pain),
                  tuple(gcs), tuple(burn), tuple(fall_heights(text)), quoted)


def fall_heights(text: str) -> list[float]:
    """Heights fallen, in metres: a number with its unit near a fall word ("fell about ten feet", "two floors
    down he fell"), or the place fallen from ("fell from the first-floor balcony": a storey, 3 m)."""
    out = []
    for match in _FALL_HEIGHT.finditer(text):
        value, unit = (match.group(1), match.group(2)) if match.group(1) else (match.group(3), match.group(4))
        metres = _metres(float(value), unit)
        if metres is not None and 0.3 <= metres <= 100:
            out.append(metres)
    for match in _FALL_PLACE.finditer(text):
        storey, place = match.group(1), match.group(2)
        floors = {"first": 1, "1st": 1, "second": 2, "2nd": 2, "third": 3, "3rd": 3}.get(storey or "", 0)
        out.append(max(_PLACE_M[place], floors * _FLOOR_M))
    out += [_PLACE_M[m.group(1)] for m in _PLACE_BEFORE.finditer(text)]
    if out or re.search(r"\b" + _FALL_WORD + r"\b", text):  # "fell to the patio below, one floor"
        words = {"one": 1, "a": 1, "two": 2, "three": 3, "four": 4}
        out += [_FLOOR_M * (words.get(m.group(1)) or float(m.group(1))) for m in _STOREYS.finditer(text)
                if (words.get(m.group(1)) or float(m.group(1))) <= 30]
    return out


def _metres(value: float, unit: str) -> float | None:
    if unit in ("feet", "foot", "ft"):
        return round(value * 0.3048, 2)
    if unit in ("floors", "floor", "storeys", "storey", "stories", "story"):
        return value * _FLOOR_M if value <= 30 else None
    return value


def _numbers(pattern: re.Pattern[str], text: str) -> list[float]:
    out = []
    for match in pattern.finditer(text):
        value = next((g for g in match.groups() if g is not None and g[:1].isdigit()), None)
        if value is not None:
            out.append(float(value))
    return out


def _temperatures(text: str) -> list[tuple[float, str]]:
    out = []
    for match in _TEMP.finditer(text):
        groups = match.groups()
        value = groups[0] or groups[2]
        unit = (groups[1] or groups[3] or "").lower()
        if value is not None:
            out.append((float(value), unit))
    return out


def _celsius(value: float, unit: str) -> float | None:
    if unit == "f" or (not unit and 93 <= value <= 110):
        return round((value - 32) * 5 / 9, 1)
    if 30 <= value <= 45:
        return value
    return None


def _mmol(value: float) -> float:
    """A sugar above 35 is in mg/dL (US meters); below, mmol/L (UK, Australia)."""
    return round(value / 18.0, 1) if value > 35 else value
