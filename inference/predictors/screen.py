"""A pre-screen of a few milliseconds that orders the triage backlog: which waiting calls the classifier sees first.

It never assigns a level (the algorithm and the trained head do); it only decides, when a burst leaves more
calls waiting than one micro-batch takes, which are classified first, so a likely life-threatening call is
not stuck behind a hundred sprained ankles in the triage queue. Its knowledge is the clinical catalogue's: a
phrase of a concept that alone fires a decision-point-A rule scores 2, one that alone fires a B rule scores 1,
plus 1 per alarming vital sign (``inference.clinical.vitals``). Negation is not read here (a screen may put a denied
finding early; the classifier then decides). Spelling is matched as the catalogue matches it.
"""

from __future__ import annotations

import re

from inference.clinical import Catalogue, load_catalogue
from inference.clinical.lexicon import compile_phrase
from inference.clinical.text import tokenize
from inference.clinical.vitals import read_vitals

SCREEN_CHARS = 4000


_PATTERNS: dict[str, tuple[re.Pattern[str], re.Pattern[str]]] = {}  # by catalogue digest


def _patterns(catalogue: Catalogue) -> tuple[re.Pattern[str], re.Pattern[str]]:
    if catalogue.digest not in _PATTERNS:
        _PATTERNS[catalogue.digest] = _compile(catalogue)
    return _PATTERNS[catalogue.digest]


def _compile(catalogue: Catalogue) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """One alternation of every phrase of the concepts that alone fire an A rule, and one of those that alone
    fire a B rule (a rule whose only condition is "any of" these concepts)."""
    def concepts(point: str) -> set[str]:
        out = set()
        for rule in catalogue.rules:
            when = rule.when
            if rule.point == point and not (when.all or when.age or when.sex or when.vitals):
                out |= {ref.concept for ref in when.any}
        return out

    a = concepts("A")
    b = concepts("B") - a
    def alternation(ids: set[str]) -> re.Pattern[str]:
        return re.compile("|".join(compile_phrase(p) for cid in sorted(ids) for p in catalogue.concepts[cid].phrases))
    return alternation(a), alternation(b)


def screen_score(transcript: str, catalogue: Catalogue | None = None) -> int:
    """Higher is more likely ESI 1-2. O(length)."""
    catalogue = catalogue or load_catalogue()
    a, b = _patterns(catalogue)
    text = tokenize(transcript[:SCREEN_CHARS]).text
    vitals = read_vitals(text)
    spo2, heart, resp = vitals.worst("spo2"), vitals.worst("heart_rate"), vitals.worst("resp_rate")
    danger = (spo2 is not None and spo2 < catalogue.spo2_below) + (heart is not None and (heart >= 130 or heart <= 40))
    danger += resp is not None and (resp >= 30 or resp <= 8)
    return 2 * len(a.findall(text)) + len(b.findall(text)) + int(danger)
