"""The ESI algorithm (Gilboy et al., ESI Implementation Handbook v4/v5), decision point by decision point, over
a call's findings and the clinical catalogue:

    A  a life threat needing an immediate life-saving intervention   -> ESI 1
    B  a high-risk situation, new confusion/lethargy, severe pain     -> ESI 2
    C  resources: none -> 5, one -> 4, two or more -> D
    D  danger-zone vitals for the patient's age                        -> ESI 2, else ESI 3

Every level comes with the decision point that decided it and the reasons behind it. When no resource rule
in the catalogue covers the complaint, C cannot count and the algorithm says so (``resources is None``); the
learned model decides the level there (``judgement``). Pure function of (findings, catalogue):
O(rules * conditions).
"""

from __future__ import annotations

from dataclasses import dataclass

from .catalogue import RESOURCE_WEIGHTS, Catalogue, Condition, Range, ResourceRule, Rule
from .findings import Findings
from .vitals import Vitals


@dataclass(frozen=True)
class Reason:
    point: str  # A | B | C | D
    text: str
    rule: str = ""  # the catalogue rule id, when a rule gave it

    def __str__(self) -> str:
        return f"{self.point}: {self.text}"


@dataclass(frozen=True)
class AlgorithmResult:
    level: int | None  # None: A and B found nothing and no resource rule covers the complaint
    decision_point: str | None
    reasons: tuple[Reason, ...]
    resources: tuple[str, ...] | None  # the resource types counted at C; None when C could not count
    danger_zone: tuple[Reason, ...] = ()  # D reasons, also when the level is decided elsewhere
    fired: tuple[str, ...] = ()  # every A and B rule that holds, deciding or not
    corrected_only: tuple[str, ...] = ()  # A and B rules that would hold only through a spelling correction
    near: tuple[NearMiss, ...] = ()  # A and B rules that nearly hold: what a learned model may lean on
    complaints: tuple[str, ...] = ()  # the complaints the resource rules counted at C


@dataclass(frozen=True)
class NearMiss:
    """An A or B rule all of whose findings but one hold, or all of them but not its age or sex test (its
    vital-sign tests must hold), with the findings that do: "chest pain" for "chest pain in an adult over 40" in
    a man of 35 (``complete``), "labour" for "cord prolapse in labour"."""

    point: str
    rule: str
    reason: str
    concepts: tuple[str, ...]
    complete: bool = False  # every finding of the rule holds; only its age or sex test fails


def matches(condition: Condition, findings: Findings, catalogue: Catalogue | None = None) -> bool:
    patient = findings.patient
    if condition.age is not None and not condition.age(patient.age):
        return False
    if condition.sex is not None and patient.sex not in (condition.sex, "unknown"):
        return False
    for name, test in condition.vitals:
        value = reading(name, test, findings, catalogue)
        if value is None or not test(value):
            return False
    if any(not any(findings.holds(ref) for ref in group) for group in condition.all):
        return False
    if condition.any and not any(findings.holds(ref) for ref in condition.any):
        return False
    return not any(findings.holds(ref) for ref in condition.none)


def reading(name: str, test: Range, findings: Findings, catalogue: Catalogue | None) -> float | None:
    """The value of a reading a rule tests: the most alarming one stated, or the height fallen over the
    patient's typical height for age."""
    vitals = findings.vitals
    if name == "fall_height_ratio":
        height = vitals.worst("fall_height_m")
        typical = catalogue.height_for_age(findings.patient.age) if catalogue is not None else 1.7
        return None if height is None else height / typical
    return vitals.worst(name) if name != "glucose_mmol" else _sugar(vitals, test)


def _sugar(vitals: Vitals, test: Range) -> float | None:
    """Both ends of the sugar range alarm: the low reading when it passes the test, else the high one."""
    low, high = vitals.worst("glucose_mmol"), vitals.highest("glucose_mmol")
    if low is not None and test(low):
        return low
    return high


def run_algorithm(findings: Findings, catalogue: Catalogue) -> AlgorithmResult:
    """Decision points in order. A and B rest only on what the caller said: a finding read through a spelling
    correction ("stabed") supports C but never decides A or B alone (``corrected_only`` names the rules it
    would have fired)."""
    danger = danger_zone_reasons(findings, catalogue)
    said = findings.without_corrections()
    fired = [r for r in catalogue.rules if matches(r.when, said, catalogue)]
    corrected_only = tuple(r.id for r in catalogue.rules if r not in fired and matches(r.when, findings, catalogue))
    ids = tuple(r.id for r in fired)
    for point, level in (("A", 1), ("B", 2)):
        deciding = [r for r in fired if r.point == point]
        if deciding:
            return AlgorithmResult(level, point, _reasons(deciding), None, danger, ids, corrected_only,
                                   _near_misses(catalogue, said, fired))
    near = _near_misses(catalogue, said, fired)
    covered = [r for r in catalogue.resource_rules if matches(r.when, findings, catalogue)]
    if not covered:
        return AlgorithmResult(None, None, (), None, danger, ids, corrected_only, near)
    resources = _resources(covered)
    complaints = tuple(dict.fromkeys(r.complaint for r in covered))
    count = sum(RESOURCE_WEIGHTS[r] for r in resources)
    if count >= 2 and danger:
        return AlgorithmResult(2, "D", danger, resources, danger, ids, corrected_only, near, complaints)
    level = 3 if count >= 2 else 4 if count == 1 else 5
    return AlgorithmResult(level, "C", (resource_reason(resources, covered),), resources, danger, ids, corrected_only,
                           near, complaints)


def _near_misses(catalogue: Catalogue, findings: Findings, fired: list[Rule]) -> tuple[NearMiss, ...]:
    out = []
    for rule in catalogue.rules:
        when = rule.when
        if rule in fired or any(findings.holds(ref) for ref in when.none):
            continue
        if any((value := reading(name, test, findings, catalogue)) is None or not test(value)
               for name, test in when.vitals):
            continue
        groups = [*when.all, *([when.any] if when.any else [])]
        held = [next((ref.concept for ref in group if findings.holds(ref)), None) for group in groups]
        found = tuple(c for c in held if c is not None)
        if found and len(found) >= len(groups) - 1:
            out.append(NearMiss(rule.point, rule.id, rule.reason, found, complete=len(found) == len(groups)))
    return tuple(out)


def _reasons(rules: list[Rule]) -> tuple[Reason, ...]:
    seen, out = set(), []
    for rule in rules:
        if rule.reason not in seen:
            seen.add(rule.reason)
            out.append(Reason(rule.point, rule.reason, rule.id))
    return tuple(out)


def _resources(rules: list[ResourceRule]) -> tuple[str, ...]:
    found: list[str] = []
    for rule in rules:
        found += [r for r in rule.resources if r not in found]
    return tuple(found)


RESOURCE_NAMES = {
    "labs": "labs", "ecg": "ECG", "xray": "X-ray", "imaging": "CT/ultrasound", "iv_fluids": "IV fluids",
    "iv_meds": "IV/IM medication", "consult": "specialist consult", "simple_procedure": "procedure",
    "complex_procedure": "procedure under sedation",
}


def resource_reason(resources: tuple[str, ...], rules: list[ResourceRule]) -> Reason:
    count = sum(RESOURCE_WEIGHTS[r] for r in resources)
    complaint = rules[0].complaint if len(rules) == 1 else "; ".join(dict.fromkeys(r.complaint for r in rules))
    if not resources:
        return Reason("C", f"no resources ({complaint})", rules[0].id)
    names = ", ".join(RESOURCE_NAMES[r] for r in resources)
    plural = "resource" if count == 1 else "resources"
    return Reason("C", f"{count} {plural} ({names}) for {complaint}", rules[0].id)


def danger_zone_reasons(findings: Findings, catalogue: Catalogue) -> tuple[Reason, ...]:
    """Decision point D: heart or breathing rate above the age band's limit, or SpO2 below the limit."""
    age, vitals, out = findings.patient.age, findings.vitals, []
    band = next((b for b in catalogue.danger_bands if b.age(age)), None)
    heart, resp, spo2 = vitals.worst("heart_rate"), vitals.worst("resp_rate"), vitals.worst("spo2")
    if band is not None and heart is not None and heart > band.heart_rate_above:
        out.append(Reason("D", f"heart rate {heart:g} (danger zone > {band.heart_rate_above:g} at this age)"))
    if band is not None and resp is not None and resp > band.resp_rate_above:
        out.append(Reason("D", f"breathing rate {resp:g}/min (danger zone > {band.resp_rate_above:g} at this age)"))
    if spo2 is not None and spo2 < catalogue.spo2_below:
        out.append(Reason("D", f"SpO2 {spo2:g}% (danger zone < {catalogue.spo2_below:g}%)"))
    return tuple(out)
