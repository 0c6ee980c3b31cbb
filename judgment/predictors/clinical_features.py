"""What the learned ESI head sees of the explicit algorithm: one vector per call, by name.

Names, not positions, tie a trained bundle to the catalogue: the bundle stores the names it was trained on,
and a catalogue edited afterwards (a new concept, a renamed rule) changes only the features it names. Per
call: each concept asserted now (``c:<id>``) or denied (``n:<id>``), each rule of decision points A and B that
fires (``r:<id>``), the algorithm's level (``level:1``..``level:5``, ``level:none``), the resource count at C
(``resources:0``..``resources:3+``), danger-zone vitals (``danger_zone``), and the patient's age band.
"""

from __future__ import annotations

from collections.abc import Sequence

from judgment.clinical import AlgorithmResult, Catalogue, Findings, extract_many, run_algorithm
from judgment.clinical.assertion import CURRENT, HISTORICAL, NEGATED, RESOLVED
from judgment.clinical.catalogue import PERSISTENT_KINDS, RESOURCE_WEIGHTS

AGE_BANDS = (("age:<1", 0, 1), ("age:1-15", 1, 16), ("age:16-64", 16, 65), ("age:65+", 65, 200))


def feature_names(catalogue: Catalogue) -> list[str]:
    return [
        *(f"c:{c}" for c in sorted(catalogue.concepts)),
        *(f"n:{c}" for c in sorted(catalogue.concepts)),
        *(f"r:{r.id}" for r in catalogue.rules),
        *(f"level:{k}" for k in ("1", "2", "3", "4", "5", "none")),
        *(f"resources:{k}" for k in ("0", "1", "2", "3+")),
        "danger_zone", "vitals_quoted",
        *(name for name, _, _ in AGE_BANDS),
    ]


def call_features(findings: Findings, result: AlgorithmResult, catalogue: Catalogue) -> set[str]:
    """The names of the features that are on for this call."""
    persistent = {c.id for c in catalogue.concepts.values() if c.kind in PERSISTENT_KINDS}
    on = {f"c:{f.concept}" for f in findings.items
          if f.status in CURRENT or (f.concept in persistent and f.status in (HISTORICAL, RESOLVED))}
    on |= {f"n:{f.concept}" for f in findings.items if f.status == NEGATED}
    on |= {f"r:{rule}" for rule in result.fired}
    on.add(f"level:{result.level}" if result.level is not None else "level:none")
    if result.resources is not None:
        count = sum(RESOURCE_WEIGHTS[r] for r in result.resources)
        on.add(f"resources:{min(count, 3)}" if count < 3 else "resources:3+")
    if result.danger_zone:
        on.add("danger_zone")
    if findings.vitals.quoted:
        on.add("vitals_quoted")
    age = findings.patient.age
    on |= {name for name, low, high in AGE_BANDS if low <= age < high}
    return on


def columns(active: Sequence[set[str]], names: Sequence[str]) -> tuple[tuple[int, ...], ...]:
    """Per call, the sorted positions in ``names`` of its features that are on (names the head was not trained
    on are left out)."""
    index = {name: i for i, name in enumerate(names)}
    return tuple(tuple(sorted(index[n] for n in on if n in index)) for on in active)


def assess_calls(
    transcripts: Sequence[str], catalogue: Catalogue
) -> tuple[list[Findings], list[AlgorithmResult], list[set[str]]]:
    """Findings, the algorithm's result and the active feature names of each call."""
    findings = extract_many(transcripts, catalogue)
    results = [run_algorithm(found, catalogue) for found in findings]
    active = [call_features(found, result, catalogue) for found, result in zip(findings, results, strict=True)]
    return findings, results, active
