"""The clinical catalogue's records: what the loader (``catalogue``) makes of fixtures/clinical/*.yaml, and what the
reader, the findings and the algorithm read. Plain frozen data."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .reader import ReadingRules

# ESI handbook, Table 5-1: what counts as a resource, and how many; anything else (examination, oral drugs,
# point-of-care tests, simple wound care, a splint) counts as none.
RESOURCE_WEIGHTS = {
    "labs": 1, "ecg": 1, "xray": 1, "imaging": 1, "iv_fluids": 1, "iv_meds": 1, "consult": 1,
    "simple_procedure": 1, "complex_procedure": 2,
}


@dataclass(frozen=True)
class Concept:
    id: str
    label: str
    kind: str
    phrases: tuple[str, ...]
    opposite: str | None = None  # for a "normal" concept: the finding that holds when it is denied
    implies: tuple[str, ...] = ()
    screen: int | None = None  # weight in the triage backlog's pre-screen (None: from the rules it fires alone)
    resolves: tuple[str, ...] = ()  # findings a later statement of this one ends ("bleeding stopped" -> heavy bleeding)


@dataclass(frozen=True)
class Range:
    """A numeric test written as "< 0.25", ">= 65" or "3-8" (lower bound included, upper excluded)."""

    text: str
    test: Callable[[float], bool]

    def __call__(self, value: float) -> bool:
        return self.test(value)


@dataclass(frozen=True)
class ConceptRef:
    concept: str
    statuses: frozenset[str]


@dataclass(frozen=True)
class Condition:
    """All of: every group in ``all`` (a group is any-of), at least one of ``any`` (when given), none of
    ``none``, the age, sex and vitals tests."""

    all: tuple[tuple[ConceptRef, ...], ...] = ()
    any: tuple[ConceptRef, ...] = ()
    none: tuple[ConceptRef, ...] = ()
    age: Range | None = None
    sex: str | None = None
    vitals: tuple[tuple[str, Range], ...] = ()


@dataclass(frozen=True)
class Rule:
    """A life threat (decision point A) or a high-risk situation (B)."""

    id: str
    point: str
    reason: str
    system: str
    when: Condition
    sources: tuple[str, ...]


@dataclass(frozen=True)
class ResourceRule:
    """Decision point C: the resources a complaint needs."""

    id: str
    complaint: str
    when: Condition
    resources: tuple[str, ...]
    sources: tuple[str, ...]

    @property
    def count(self) -> int:
        return sum(RESOURCE_WEIGHTS[r] for r in self.resources)


@dataclass(frozen=True)
class DangerBand:
    age: Range
    heart_rate_above: float
    resp_rate_above: float


@dataclass(frozen=True)
class Catalogue:
    version: str
    digest: str
    sources: Mapping[str, str]
    concepts: Mapping[str, Concept]
    reading: ReadingRules  # what the medspaCy reader is built from (``reader_for``)
    rules: tuple[Rule, ...]
    resource_rules: tuple[ResourceRule, ...]
    danger_bands: tuple[DangerBand, ...]
    spo2_below: float
    measured: tuple[tuple[str, str, Range], ...] = ()  # (concept, vital, test): a reading that shows a finding
    heights: tuple[tuple[Range, float], ...] = ()  # (age band, typical height in metres)
    screen_alarming: tuple[tuple[str, Range], ...] = ()  # (vital, test): a reading the intake screen counts

    def height_for_age(self, age: float) -> float:
        return next((metres for band, metres in self.heights if band(age)), 1.7)

    @property
    def label(self) -> str:
        return f"{self.version}+{self.digest[:8]}"
