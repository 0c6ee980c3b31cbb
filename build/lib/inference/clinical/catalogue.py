"""The clinical catalogue on disk (fixtures/clinical/*.yaml), loaded and validated into plain records.

A clinical lead edits the YAML; this module refuses a catalogue that would silently mis-triage: an unknown
key, a concept that no phrase defines, a resource type the ESI handbook does not count, a source that is not
cited in catalogue.yaml, a phrase that does not parse. Each error names the file and the entry.
"""

from __future__ import annotations

import operator
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inference.data_files import ContentCache, check_keys, parse_yaml

from .context import CATEGORIES, DIRECTIONS, ContextRules, Cue
from .lexicon import Lexicon, PhraseError, compile_phrase

REPO_ROOT = Path(__file__).resolve().parents[2]
# ESI handbook, Table 5-1: what counts as a resource, and how many; anything else (examination, oral drugs,
# point-of-care tests, simple wound care, a splint) counts as none.
RESOURCE_WEIGHTS = {
    "labs": 1, "ecg": 1, "xray": 1, "imaging": 1, "iv_fluids": 1, "iv_meds": 1, "consult": 1,
    "simple_procedure": 1, "complex_procedure": 2,
}
KINDS = frozenset({"finding", "normal", "risk", "mechanism", "population"})
POINTS = frozenset({"A", "B"})
VITALS = frozenset({"heart_rate", "resp_rate", "spo2", "temperature_c", "glucose_mmol", "systolic_bp", "pain_score"})
# A concept reference may say which mentions count: "fever" (now, or possibly now), "seizure@recent" (also one
# that has stopped), "stroke@history" (in the past), "x@any" (any but denied, asked about or someone else's).
SCOPES = {
    "": frozenset({"present", "possible"}),
    "recent": frozenset({"present", "possible", "resolved"}),
    "history": frozenset({"historical", "resolved"}),
    "any": frozenset({"present", "possible", "resolved", "historical"}),
}
_OPS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq,
}
_EXPRESSION = re.compile(r"^\s*(<=|>=|<|>|==)\s*(-?\d+(?:\.\d+)?)\s*$|^\s*(\d+(?:\.\d+)?)\s*-\s*(\d+(?:\.\d+)?)\s*$")


class CatalogueError(ValueError):
    """The catalogue does not validate; the message names the file and the entry."""


@dataclass(frozen=True)
class Concept:
    id: str
    label: str
    kind: str
    phrases: tuple[str, ...]
    opposite: str | None = None  # for a "normal" concept: the finding that holds when it is denied
    implies: tuple[str, ...] = ()
    screen: int | None = None  # weight in the triage backlog's pre-screen (None: from the rules it fires alone)


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
    lexicon: Lexicon
    context: ContextRules
    rules: tuple[Rule, ...]
    resource_rules: tuple[ResourceRule, ...]
    danger_bands: tuple[DangerBand, ...]
    spo2_below: float

    @property
    def label(self) -> str:
        return f"{self.version}+{self.digest[:8]}"


def default_catalogue_dir() -> Path:
    return Path(os.environ.get("TRIAGE_CLINICAL_DIR", REPO_ROOT / "fixtures" / "clinical"))


FILES = ("catalogue.yaml", "concepts.yaml", "context.yaml", "high_risk.yaml", "resources.yaml", "vitals.yaml")
_cache: ContentCache[Catalogue] = ContentCache(
    lambda path: CatalogueError(f"{path}: missing (the catalogue needs {', '.join(FILES)})")
)


def load_catalogue(directory: str | Path | None = None) -> Catalogue:
    """The catalogue in ``directory`` (default: TRIAGE_CLINICAL_DIR or fixtures/clinical), parsed once per
    content: an edited file is picked up by the next call."""
    return _cache.load(Path(directory) if directory is not None else default_catalogue_dir(), FILES, _parse)


def _yaml(name: str, text: str) -> dict[str, Any]:
    return parse_yaml(name, text, CatalogueError)


def _parse(texts: dict[str, str], digest: str) -> Catalogue:
    index = _yaml("catalogue.yaml", texts["catalogue.yaml"])
    _keys("catalogue.yaml", index, {"version", "sources"}, required={"version", "sources"})
    sources = {str(k): str(v) for k, v in index["sources"].items()}
    concepts = _concepts(_yaml("concepts.yaml", texts["concepts.yaml"]))
    context = _context(_yaml("context.yaml", texts["context.yaml"]))
    rules = _rules(_yaml("high_risk.yaml", texts["high_risk.yaml"]), concepts, sources)
    resource_rules = _resource_rules(_yaml("resources.yaml", texts["resources.yaml"]), concepts, sources)
    bands, spo2 = _danger_zone(_yaml("vitals.yaml", texts["vitals.yaml"]))
    lexicon = Lexicon({c.id: c.phrases for c in concepts.values()})
    return Catalogue(str(index["version"]), digest, sources, concepts, lexicon, context, rules, resource_rules,
                     bands, spo2)


def _keys(where: str, entry: Mapping[str, Any], allowed: set[str], required: set[str] = frozenset()) -> None:
    check_keys(where, entry, allowed, required, error=CatalogueError)


def _concepts(data: dict[str, Any]) -> dict[str, Concept]:
    _keys("concepts.yaml", data, {"concepts"}, required={"concepts"})
    concepts: dict[str, Concept] = {}
    for cid, entry in data["concepts"].items():
        where = f"concepts.yaml: {cid}"
        _keys(where, entry, {"label", "kind", "phrases", "opposite", "implies", "screen"},
              required={"label", "kind", "phrases"})
        if entry.get("screen") not in (None, 0, 1, 2):
            raise CatalogueError(f"{where}: screen must be 0, 1 or 2")
        if entry["kind"] not in KINDS:
            raise CatalogueError(f"{where}: kind {entry['kind']!r} is not one of {', '.join(sorted(KINDS))}")
        phrases = tuple(str(p) for p in entry["phrases"] or ())
        for phrase in phrases:
            try:
                compile_phrase(phrase)
            except PhraseError as error:
                raise CatalogueError(f"{where}: {error}") from error
        concepts[str(cid)] = Concept(str(cid), str(entry["label"]), entry["kind"], phrases,
                                     entry.get("opposite"), tuple(entry.get("implies") or ()), entry.get("screen"))
    for concept in concepts.values():
        for ref in (*concept.implies, *([concept.opposite] if concept.opposite else [])):
            if ref not in concepts:
                raise CatalogueError(f"concepts.yaml: {concept.id}: refers to unknown concept {ref!r}")
        if concept.opposite and concept.kind != "normal":
            raise CatalogueError(f"concepts.yaml: {concept.id}: only a 'normal' concept has an opposite")
    return concepts


def _context(data: dict[str, Any]) -> ContextRules:
    _keys("context.yaml", data, {"cues", "terminators", "pseudo"}, required={"cues", "terminators", "pseudo"})
    cues = []
    for i, entry in enumerate(data["cues"]):
        where = f"context.yaml: cue {i + 1} ({entry.get('phrase')!r})"
        _keys(where, entry, {"phrase", "category", "direction", "uncertain", "window"},
              required={"phrase", "category", "direction"})
        if entry["category"] not in CATEGORIES or entry["direction"] not in DIRECTIONS:
            raise CatalogueError(f"{where}: category must be one of {sorted(CATEGORIES)}, direction one of "
                                 f"{sorted(DIRECTIONS)}")
        cues.append(Cue(str(entry["phrase"]), entry["category"], entry["direction"], bool(entry.get("uncertain")),
                        int(entry.get("window", 6))))
    try:
        return ContextRules(cues, [str(t) for t in data["terminators"]], [str(p) for p in data["pseudo"]])
    except PhraseError as error:
        raise CatalogueError(f"context.yaml: {error}") from error


def parse_range(text: str | float | int, where: str) -> Range:
    source = str(text)
    match = _EXPRESSION.match(source)
    if not match:
        raise CatalogueError(f'{where}: {source!r} is not a test like "< 0.25", ">= 65" or "3-8"')
    if match.group(1):
        op, bound = _OPS[match.group(1)], float(match.group(2))
        return Range(source, lambda v: op(v, bound))
    low, high = float(match.group(3)), float(match.group(4))
    return Range(source, lambda v: low <= v < high)


def _refs(items: Any, concepts: Mapping[str, Concept], where: str) -> tuple[ConceptRef, ...]:
    if isinstance(items, str):
        items = [items]
    refs = []
    for item in items or ():
        name, _, scope = str(item).partition("@")
        if name not in concepts:
            raise CatalogueError(f"{where}: unknown concept {name!r}")
        if scope not in SCOPES:
            raise CatalogueError(f"{where}: {item!r}: scope must be one of @{', @'.join(s for s in SCOPES if s)}")
        refs.append(ConceptRef(name, SCOPES[scope]))
    return tuple(refs)


def _condition(entry: Any, concepts: Mapping[str, Concept], where: str) -> Condition:
    _keys(where, entry, {"all", "any", "none", "age", "sex", "vitals"})
    groups = tuple(_refs(group, concepts, where) for group in entry.get("all") or ())
    vitals = []
    for name, test in (entry.get("vitals") or {}).items():
        if name not in VITALS:
            raise CatalogueError(f"{where}: unknown vital {name!r} (known: {', '.join(sorted(VITALS))})")
        vitals.append((name, parse_range(test, f"{where}: {name}")))
    if entry.get("sex") not in (None, "female", "male"):
        raise CatalogueError(f"{where}: sex must be female or male")
    condition = Condition(
        groups, _refs(entry.get("any"), concepts, where), _refs(entry.get("none"), concepts, where),
        parse_range(entry["age"], f"{where}: age") if "age" in entry else None, entry.get("sex"), tuple(vitals),
    )
    if not (condition.all or condition.any or condition.vitals):
        raise CatalogueError(f"{where}: a rule needs at least one concept or vital sign")
    return condition


def _sources(entry: Mapping[str, Any], sources: Mapping[str, str], where: str) -> tuple[str, ...]:
    cited = entry.get("source") or []
    cited = [cited] if isinstance(cited, str) else list(cited)
    if not cited:
        raise CatalogueError(f"{where}: cite at least one source (ids from catalogue.yaml)")
    for source in cited:
        if source not in sources:
            raise CatalogueError(f"{where}: source {source!r} is not listed in catalogue.yaml")
    return tuple(cited)


def _unique(ids: Sequence[str], name: str) -> None:
    seen = set()
    for rule_id in ids:
        if rule_id in seen:
            raise CatalogueError(f"{name}: id {rule_id!r} is used twice")
        seen.add(rule_id)


def _rules(data: dict[str, Any], concepts: Mapping[str, Concept], sources: Mapping[str, str]) -> tuple[Rule, ...]:
    _keys("high_risk.yaml", data, {"rules"}, required={"rules"})
    rules = []
    for entry in data["rules"]:
        where = f"high_risk.yaml: {entry.get('id', '?')}"
        _keys(where, entry, {"id", "point", "reason", "system", "when", "source"},
              required={"id", "point", "reason", "system", "when", "source"})
        if entry["point"] not in POINTS:
            raise CatalogueError(f"{where}: point must be A or B")
        rules.append(Rule(str(entry["id"]), entry["point"], str(entry["reason"]), str(entry["system"]),
                          _condition(entry["when"], concepts, where), _sources(entry, sources, where)))
    _unique([r.id for r in rules], "high_risk.yaml")
    return tuple(rules)


def _resource_rules(
    data: dict[str, Any], concepts: Mapping[str, Concept], sources: Mapping[str, str]
) -> tuple[ResourceRule, ...]:
    _keys("resources.yaml", data, {"rules"}, required={"rules"})
    rules = []
    for entry in data["rules"]:
        where = f"resources.yaml: {entry.get('id', '?')}"
        _keys(where, entry, {"id", "complaint", "when", "resources", "source"},
              required={"id", "complaint", "when", "resources", "source"})
        resources = tuple(entry["resources"] or ())
        unknown = [r for r in resources if r not in RESOURCE_WEIGHTS]
        if unknown:
            raise CatalogueError(f"{where}: unknown resource(s) {unknown} (known: {', '.join(RESOURCE_WEIGHTS)})")
        rules.append(ResourceRule(str(entry["id"]), str(entry["complaint"]), _condition(entry["when"], concepts, where),
                                  resources, _sources(entry, sources, where)))
    _unique([r.id for r in rules], "resources.yaml")
    return tuple(rules)


def _danger_zone(data: dict[str, Any]) -> tuple[tuple[DangerBand, ...], float]:
    _keys("vitals.yaml", data, {"danger_zone"}, required={"danger_zone"})
    zone = data["danger_zone"]
    _keys("vitals.yaml: danger_zone", zone, {"bands", "spo2_below", "source"}, required={"bands", "spo2_below"})
    bands = []
    for i, band in enumerate(zone["bands"]):
        where = f"vitals.yaml: band {i + 1}"
        _keys(where, band, {"age", "heart_rate_above", "resp_rate_above"},
              required={"age", "heart_rate_above", "resp_rate_above"})
        bands.append(DangerBand(parse_range(band["age"], where), float(band["heart_rate_above"]),
                                float(band["resp_rate_above"])))
    return tuple(bands), float(zone["spo2_below"])
