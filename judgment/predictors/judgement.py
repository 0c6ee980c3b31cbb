"""The level a call gets: the explicit ESI algorithm and the learned model, combined, with reasons a clinician can
sign: every reason names a finding or a catalogue rule.

The learned head's probabilities give a level through the cost-sensitive rule of ``esi.decide_levels`` (a
split probability mass, the two likeliest levels within ``SPLIT_MARGIN``, goes to the more urgent). Then:

- A or B fired: the algorithm's level stands, with its rules as reasons; the model may make it ESI 1 only with
  a named finding behind it (an A rule that nearly holds: ``AlgorithmResult.near``). A disagreement marks the
  call uncertain.
- Otherwise the model may raise a level the rules gave (at C) to ESI 1 or 2 only together with a named finding:
  a rule of that decision point that nearly holds ("B: chest pain (close to: chest pain in an adult over
  40)"). Where nothing named backs it, the level stays at C. Where no rule recognised the call at all, the
  model is the only signal and its level stands. Either way the call is then marked uncertain and the reason
  says what was read: the phrases that weighed most ("calls worded like this one ('went grey', 'on the
  floor') were often ESI 2").
- At C the model counts the resources (the catalogue's resource rules cover only the complaints they name, and
  letting their count override the head raised over-triage: docs/decisions/triage-judgement.md); the reason
  names the complaint the rules recognised, or, where no rule covers it, the phrases read, and the call is
  uncertain. A disagreement of two levels or more with the rules' count marks it uncertain too.
- Decision point D last: a call at ESI 3 with danger-zone vitals is ESI 2.

A rule that would have fired only through a spelling correction marks the call uncertain and says so.

An uncertain call names the other level it is uncertain against (``Judgement.alternative``): the most urgent
level another signal gave (the rules, the model's cost-sensitive level, the other half of a split mass) when
one is more urgent than the verdict, else the nearest less urgent one. The scheduler holds the call at the more
urgent of the two until a dispatcher confirms one (``scheduler.config.scheduling_level``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from judgment.clinical import AlgorithmResult

# Where the rules counted resources, the model's own count replaces theirs only when it gives it this much: a
# flat distribution is no reading. (On the development and independent sets the full model, where it differs
# from the rules at C, is right every time and gives its level at least 0.3 in all but three calls.)
C_CONFIDENCE = 0.3
SPLIT_MARGIN = 0.05  # the two most likely levels this close: the mass is split, choose the more urgent
POINT_OF_LEVEL = {1: "A", 2: "B", 3: "C", 4: "C", 5: "C"}
RESOURCES_OF_LEVEL = {3: "two or more resources", 4: "one resource", 5: "no resources"}


@dataclass(frozen=True)
class Judgement:
    esi: int
    decision_point: str  # A | B | C | D
    reasons: tuple[str, ...]
    uncertain: bool
    alternative: int | None = None  # uncertain: the other level a signal gave (None: none differs)


def judge(
    probabilities: Sequence[float], model_level: int, result: AlgorithmResult, *,
    labels: dict[str, str] | None = None, evidence: Sequence[str] = (),
) -> Judgement:
    """Combine the model's level (already decided from ``probabilities``) with the algorithm's ``result``.
    ``labels``: concept id -> the catalogue's words for it; ``evidence``: the phrases that weighed most."""
    split = _split_levels(probabilities)
    verdict = _judge(probabilities, model_level, result, split, labels=labels or {}, evidence=evidence)
    if not verdict.uncertain:
        return verdict
    signals = {model_level, result.level, *(split or ())}
    others = sorted(level for level in signals if level is not None and level != verdict.esi)
    more_urgent = [level for level in others if level < verdict.esi]
    alternative = more_urgent[0] if more_urgent else (others[0] if others else None)
    return replace(verdict, alternative=alternative)


def _split_levels(probabilities: Sequence[float]) -> tuple[int, int] | None:
    """The two likeliest levels when the mass is split between them (within ``SPLIT_MARGIN``), else None."""
    ranked = sorted(range(5), key=lambda k: -probabilities[k])
    if probabilities[ranked[0]] - probabilities[ranked[1]] < SPLIT_MARGIN:
        return ranked[0] + 1, ranked[1] + 1
    return None


def _judge(
    probabilities: Sequence[float], model_level: int, result: AlgorithmResult, split: tuple[int, int] | None, *,
    labels: dict[str, str], evidence: Sequence[str],
) -> Judgement:
    wanted = min(model_level, *split) if split else model_level
    uncertain = split is not None or bool(result.corrected_only)
    urgent = result.level is not None and result.decision_point in ("A", "B")
    spelling = _spelling_reasons(result)
    if urgent:
        assert result.level is not None
        if wanted < result.level and _named(result, wanted, labels):
            return Judgement(wanted, "A", (*_named(result, wanted, labels, evidence), *_strs(result.reasons)), True)
        return Judgement(result.level, result.decision_point or "B", _strs(result.reasons),
                         uncertain or wanted != result.level)
    c_level = _c_level(probabilities, wanted, result)
    if wanted <= 2:
        for level in range(wanted, 3):  # ESI 1 wanted, only a B rule nearly holding: ESI 2
            named = _named(result, level, labels, evidence)
            if named:
                return Judgement(level, POINT_OF_LEVEL[level], (*named, *_strs(result.reasons), *spelling),
                                 uncertain or result.level is None or abs(result.level - level) >= 2)
        if result.level is None:  # no rule recognised the call: the model is the only signal
            return Judgement(wanted, POINT_OF_LEVEL[wanted], (*_evidence_reason(wanted, evidence), *spelling), True)
        uncertain = True
        spelling = (*_evidence_reason(wanted, evidence), *spelling)
    level = c_level
    if level == 3 and result.danger_zone:
        return Judgement(2, "D", _strs(result.danger_zone), uncertain or (result.level is not None and result.level > 3))
    if result.level == level:
        return Judgement(level, "C", (*_strs(result.reasons), *spelling), uncertain)
    if result.complaints:
        reason = f"C: {RESOURCES_OF_LEVEL[level]} expected for {'; '.join(result.complaints)}"
        assert result.level is not None
        return Judgement(level, "C", (reason, *spelling), uncertain or abs(result.level - level) >= 2)
    said = f" for what was said: {_quoted(evidence)}" if evidence else ""
    return Judgement(level, "C", (f"C: {RESOURCES_OF_LEVEL[level]} expected{said}", *spelling), True)


def _c_level(probabilities: Sequence[float], wanted: int, result: AlgorithmResult) -> int:
    """The level at decision point C: the model's when it is 3-5 and, where the rules counted resources, the
    model gives it at least ``C_CONFIDENCE``; when the model wanted ESI 1-2 without a named finding, the rules'
    count, else the likeliest of 3-5."""
    if wanted >= 3 and (result.level is None or result.level < 3 or probabilities[wanted - 1] >= C_CONFIDENCE):
        return wanted
    if result.level is not None and result.level >= 3:
        return result.level
    return 3 + max(range(3), key=lambda k: probabilities[2 + k])


def _named(result: AlgorithmResult, level: int, labels: dict[str, str], evidence: Sequence[str] = ()
           ) -> tuple[str, ...]:
    """Reasons for ESI ``level`` from rules of its decision point that nearly hold, each naming its findings:
    with the rule when only its age or sex test fails ("B: chest pain (close to: chest pain in an adult over
    40)"), else with the words the model weighed ("A: labour, with 'cord', 'hanging out'")."""
    point = POINT_OF_LEVEL[level]
    points = ("A",) if point == "A" else ("A", "B")
    out: dict[str, None] = {}
    for near in sorted((n for n in result.near if n.point in points), key=lambda n: not n.complete):
        words = ", ".join(labels.get(c, c.replace("_", " ")) for c in near.concepts)
        if near.complete:
            out[f"{point}: {words} (close to: {near.reason})"] = None
        else:
            out[f"{point}: {words}{', with ' + _quoted(evidence) if evidence else ''}"] = None
    return tuple(out)[:3]


def _evidence_reason(level: int, evidence: Sequence[str]) -> tuple[str, ...]:
    said = f" ({_quoted(evidence)})" if evidence else ""
    return (f"uncertain: calls worded like this one{said} were often ESI {level}; no high-risk finding named",)


def _spelling_reasons(result: AlgorithmResult) -> tuple[str, ...]:
    if not result.corrected_only:
        return ()
    return (f"uncertain: a spelling correction would have fired {', '.join(result.corrected_only)}",)


def _quoted(phrases: Sequence[str]) -> str:
    return ", ".join(f"'{p}'" for p in phrases)


def _strs(reasons: Sequence[object]) -> tuple[str, ...]:
    return tuple(str(r) for r in reasons)
