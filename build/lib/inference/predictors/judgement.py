"""The level a call gets: the explicit ESI algorithm and the learned model, combined.

The learned head's probabilities give a level through the cost-sensitive rule of ``esi.decide_levels``. Where
the algorithm finds a life threat or a high-risk situation (decision points A and B) and the model disagrees,
the more urgent wins and the call is marked uncertain; so does a call whose probability mass is split between
two levels (the two most likely within ``SPLIT_MARGIN``). At decision point C the head decides: the catalogue's
resource rules cover only the complaints they name, and letting their count override the head raised
over-triage on the written corpus (docs/decisions/triage-judgement.md); where the two disagree by two levels or
more the call is marked uncertain. Decision point D is applied last: a call at ESI 3
with danger-zone vitals is ESI 2.
Every verdict carries its decision point and the reasons behind it; where the model, not a catalogue rule,
set the level, the reason says so, so a dispatcher knows to look.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from inference.clinical import AlgorithmResult

SPLIT_MARGIN = 0.05  # the two most likely levels this close: the mass is split, choose the more urgent
POINT_OF_LEVEL = {1: "A", 2: "B", 3: "C", 4: "C", 5: "C"}
RESOURCES_OF_LEVEL = {3: "two or more resources", 4: "one resource", 5: "no resources"}


@dataclass(frozen=True)
class Judgement:
    esi: int
    decision_point: str  # A | B | C | D
    reasons: tuple[str, ...]
    uncertain: bool


def judge(probabilities: Sequence[float], model_level: int, result: AlgorithmResult) -> Judgement:
    """Combine the model's level (already decided from ``probabilities``) with the algorithm's ``result``."""
    ranked = sorted(range(5), key=lambda k: -probabilities[k])
    split = probabilities[ranked[0]] - probabilities[ranked[1]] < SPLIT_MARGIN
    level = min(model_level, ranked[0] + 1, ranked[1] + 1) if split else model_level
    urgent = result.level is not None and result.decision_point in ("A", "B")
    disagree = result.level is not None and (result.level != level if urgent else abs(result.level - level) >= 2)
    if urgent:
        level = min(level, result.level)
    if level == 3 and result.danger_zone:
        return Judgement(2, "D", tuple(str(r) for r in result.danger_zone), split or disagree)
    if result.level == level:
        return Judgement(level, result.decision_point or POINT_OF_LEVEL[level],
                         tuple(str(r) for r in result.reasons), split or disagree)
    return Judgement(level, POINT_OF_LEVEL[level], _model_reasons(level, probabilities, result), split or disagree)


def _model_reasons(level: int, probabilities: Sequence[float], result: AlgorithmResult) -> tuple[str, ...]:
    point = POINT_OF_LEVEL[level]
    p = sum(probabilities[:level]) if level <= 2 else probabilities[level - 1]
    if level <= 2:
        what = "a life threat" if level == 1 else "a high-risk presentation"
        own = f"{point}: the learned model reads {what} (P(ESI ≤ {level}) = {p:.2f}); no catalogue rule named it"
    else:
        own = f"C: the learned model expects {RESOURCES_OF_LEVEL[level]} (P = {p:.2f})"
    # The algorithm's own, less urgent reasons still tell the dispatcher what was found.
    return (own, *(str(r) for r in result.reasons))
