"""A microsecond pre-screen that orders the triage backlog: which waiting calls the classifier sees first.

It never assigns a level (the trained classifier does); it only decides, when a burst leaves more calls
waiting than one micro-batch takes, which are classified first, so a likely life-threatening call is not
stuck behind a hundred sprained ankles in the triage queue. The cues are ESI decision point A (needs a
life-saving intervention now: not breathing, no pulse, unresponsive, choking, seizing, massive bleeding)
weighted 2, decision point B (high risk: chest pain, stroke signs, overdose, anaphylaxis, confusion,
severe pain or distress) weighted 1, and the danger-zone vitals of decision point D (lexical.py) weighted 1.
Spelling is matched loosely ("breath", "cant", "unconsious") because callers type the way they talk.
"""

from __future__ import annotations

import re

from .lexical import DANGER_ZONE, vital_flags

_A = [
    r"(?:not|n'?t|nae|aint|stopped|no|barely|hardly)\s+(?:\w+\s+)?brea",
    r"can'?n?o?t\s+(?:\w+\s+)?brea|cannae\s+brea|struggling\s+(?:to|for)\s+brea|gasp|breathing\s+(?:is\s+)?(?:\w+\s+)?shallow",
    r"no\s+pulse|(?:can'?t|cannot|cannae)\s+(?:feel|find)\s+(?:a\s+|his\s+|her\s+)?(?:pulse|heartbeat)",
    r"unresponsive|uncon\w*ous|knocked\s+out|(?:not|stopped)\s+respond|(?:won'?t|willnae|not|can'?t|cannot|cannae)\s+(?:\w+\s+)?wake",
    r"collaps|slumped|floppy|lips\s+(?:(?:are|is|gone|going|turning)\s+)*blue|(?:turning|going)\s+blue|grey|funny\s+colou?r",
    r"chest\s+(?:is\s+)?(?:not|isn'?t|isnae)\s+moving|(?:doesn'?t|disnae|not|won'?t)\s+open\s+(?:his|her|their)\s+eyes",
    r"chok|stuck\s+in\s+(?:his|her|their|my)\s+throat|throat\s+(?:is\s+)?closing|back\s+blows",
    r"seiz|fitting|convuls|jerking|shaking\s+all\s+over",
    r"asthma|(?:can'?t|cannot|cannae)\s+(?:talk|speak)",
    r"bleeding\s+(?:heavily|badly|massively|everywhere|a\s+lot|loads)|blood\s+(?:is\s+)?(?:pumping|everywhere)|spurting|squirting"
    r"|pouring\s+out|soaked|won'?t\s+stop\s+bleeding",
    r"hang(?:ing|ed)\b|drown|electrocut|stabbed|shot\b|gunshot",
]
_B = [
    r"chest\s+pain|pain\s+in\s+(?:his|her|my)\s+chest|crushing|tight(?:ness)?\s+(?:in\s+)?(?:the\s+|my\s+)?chest",
    r"stroke|droop|slurr|can'?t\s+(?:lift|move)\s+(?:his|her|my)\s+arm|face\s+(?:has\s+)?(?:gone|dropped)",
    r"overdos|took\s+(?:a\s+lot\s+of|all\s+(?:his|her|my))\s+(?:pills|tablets)|swallowed\s+.*(?:pills|tablets)",
    r"anaphyla|swell\w*\s+(?:up\s+)?.*(?:throat|tongue|lips|face)|allergic|epipen|epi-pen",
    r"confus|not\s+making\s+sense|drowsy|very\s+sleepy|suicid|kill\s+(?:him|her|my)self",
    r"severe|agony|worst\s+(?:pain|headache)|screaming\s+in\s+pain",
    r"pregnan\w*.*bleed|waters?\s+(?:have\s+)?broke|baby\s+(?:is\s+)?coming|contractions",
    r"burn\w*.*(?:face|chest|whole|badly)|fell\s+from|hit\s+by\s+a|car\s+crash|head\s+injur",
]
_A_RE = [re.compile(p, re.IGNORECASE) for p in _A]
_B_RE = [re.compile(p, re.IGNORECASE) for p in _B]


def screen_score(transcript: str) -> int:
    """Higher is more likely ESI 1-2: 2 per decision-point-A cue, 1 per B cue, 1 per danger-zone vital. O(len)."""
    text = transcript[:4000]
    flags = vital_flags(text)
    return (
        2 * sum(1 for p in _A_RE if p.search(text))
        + sum(1 for p in _B_RE if p.search(text))
        + sum(int(flags[i]) for i in DANGER_ZONE)
    )
