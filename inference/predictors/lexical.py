"""Cheap lexical features the sentence embedding cannot see: danger-zone vital signs quoted by callers.

ESI decision point D looks at numbers ("heart rate 150", "sats 85", "breathing 35 a minute"); a
sentence embedding barely distinguishes "sats 85" from "sats 97", so the numbers are parsed here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import torch

_NUM = r"(\d{1,3}(?:\.\d)?)"
_GAP = r"[^\d.]{0,18}?"

_HEART = re.compile(
    r"(?:heart\s?rate|pulse|heart(?:'s| is)?\s(?:going|racing|beating|pounding)(?:\sat)?|\bhr\b)" + _GAP + _NUM
    + r"|" + _NUM + r"\s?(?:bpm|beats)"
)
_SATS = re.compile(r"(?:\bsats?\b|saturation|oxygen(?:\slevel)?|\bo2\b|spo2|pulse\s?ox\w*)" + _GAP + _NUM)
_RESP = re.compile(
    r"(?:breathing|breaths?|resp\w*(?:\srate)?)" + _GAP + _NUM + r"\s?(?:times\s)?(?:a|per|/|an?)\s?min"
    + r"|" + _NUM + r"\s?breaths"
)
_TEMP = re.compile(r"(?:temp\w*|fever\sof|thermometer\ssays)" + _GAP + _NUM)
_SUGAR = re.compile(r"(?:sugars?|glucose|\bbm\b|blood\ssugar)" + _GAP + _NUM)


def _values(pattern: re.Pattern[str], text: str) -> list[float]:
    values = []
    for match in pattern.finditer(text):
        number = next((g for g in match.groups() if g), None)
        if number is not None:
            values.append(float(number))
    return values


def _any(values: list[float], danger: Callable[[float], bool]) -> float:
    return 1.0 if any(danger(v) for v in values) else 0.0


def vital_flags(transcript: str) -> list[float]:
    """[heart rate, sats, resp rate, temperature, blood sugar in the danger zone, any vital quoted]."""
    text = transcript.lower()
    heart, sats, resp = _values(_HEART, text), _values(_SATS, text), _values(_RESP, text)
    temp, sugar = _values(_TEMP, text), _values(_SUGAR, text)
    return [
        _any(heart, lambda v: v >= 120 or 0 < v <= 40),
        _any(sats, lambda v: 40 <= v <= 91),
        _any(resp, lambda v: v >= 28 or 0 < v <= 8),
        _any(temp, lambda v: 39.5 <= v <= 43 or 103 <= v <= 110),
        # mmol/l (UK) or mg/dl (US): a hypo, or very high sugar
        _any(sugar, lambda v: v < 3.5 or 25 <= v < 40 or 40 <= v < 60 or v >= 400),
        1.0 if (heart or sats or resp or temp or sugar) else 0.0,
    ]


LEXICAL_DIM = 6
DANGER_ZONE = (0, 1, 2, 4)  # heart rate, sats, breathing rate, blood sugar: ESI decision point D


def danger_zone_vitals(transcripts: Sequence[str]) -> list[bool]:
    """Whether each call quotes a danger-zone vital sign (temperature alone is not one for adults)."""
    return [any(vital_flags(t)[i] for i in DANGER_ZONE) for t in transcripts]


def lexical_features(transcripts: Sequence[str]) -> torch.Tensor:
    return torch.tensor([vital_flags(t) for t in transcripts], dtype=torch.float32).reshape(-1, LEXICAL_DIM)
