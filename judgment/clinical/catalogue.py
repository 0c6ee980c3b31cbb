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
from pathlib import Path
from typing import Any

from judgment.data_files import ContentCache, check_keys, parse_yaml

from .phrases import PhraseError, compile_phrase
from .reader import DEFAULT_WINDOW, CueSpec, ReadingRules, word_norms
from .records import (
    RESOURCE_WEIGHTS,
    Catalogue,
    Concept,
    ConceptRef,
    Condition,
    DangerBand,
    Range,
    ResourceRule,
    Rule,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
KINDS = frozenset({"finding", "normal", "risk", "mechanism", "population"})
CUE_CATEGORIES = frozenset({"negated", "possible", "resolved", "historical", "hypothetical", "other_person",
                            "resolved_previous"})
PERSISTENT_KINDS = frozenset({"risk", "population"})  # a risk told in the past tense is a risk now
DIRECTIONS = frozenset({"forward", "backward", "both"})
POINTS = frozenset({"A", "B"})
# Readings a rule can test: vital signs, and quantities a caller states (``vitals.read_vitals``);
# fall_height_ratio is the height fallen over the patient's typical height for age (vitals.yaml).
VITALS = frozenset({"heart_rate", "resp_rate", "spo2", "temperature_c", "glucose_mmol", "systolic_bp", "pain_score",
                    "gcs", "burn_percent", "fall_height_m", "fall_height_ratio"})
# A concept reference may say which mentions count: "fever@now" (now, or possibly now), "seizure@recent" (also
# one that has stopped), "stroke@history" (in the past), "x@any" (any but denied, asked about or someone else's).
# Without a scope: @now in decision point A (a life threat is one now) and in "none" lists, @recent in B and C
# (a chest pain, a faint or a weak arm that has passed is as high-risk: ESI handbook, chapter 4).
SCOPES = {
    "": frozenset({"present", "possible"}),
    "now": frozenset({"present", "possible"}),
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


def default_catalogue_dir() -> Path:
    return Path(os.environ.get("TRIAGE_CLINICAL_DIR", REPO_ROOT / "fixtures" / "clinical"))


FILES = ("catalogue.yaml", "concepts.yaml", "context.yaml", "reading.yaml", "high_risk.yaml", "resources.yaml",
         "vitals.yaml")
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
    cues, terminators, pseudo, excluded = _context(_yaml("context.yaml", texts["context.yaml"]))
    spellings, speaker_tags = _reading(_yaml("reading.yaml", texts["reading.yaml"]))
    rules = _rules(_yaml("high_risk.yaml", texts["high_risk.yaml"]), concepts, sources)
    resource_rules = _resource_rules(_yaml("resources.yaml", texts["resources.yaml"]), concepts, sources)
    vitals = _yaml("vitals.yaml", texts["vitals.yaml"])
    bands, spo2 = _danger_zone(vitals)
    measured = _measured(vitals, concepts, sources)
    heights = _heights(vitals, sources)
    screen = _screen(vitals, sources)
    reading = ReadingRules(tuple((c.id, c.phrases) for c in concepts.values()), cues, terminators, pseudo,
                           spellings, speaker_tags, excluded)
    return Catalogue(str(index["version"]), digest, sources, concepts, reading, rules, resource_rules, bands, spo2,
                     measured, heights, screen)


def _keys(where: str, entry: Mapping[str, Any], allowed: set[str], required: set[str] = frozenset()) -> None:
    check_keys(where, entry, allowed, required, error=CatalogueError)


def _concepts(data: dict[str, Any]) -> dict[str, Concept]:
    _keys("concepts.yaml", data, {"concepts"}, required={"concepts"})
    concepts: dict[str, Concept] = {}
    for cid, entry in data["concepts"].items():
        where = f"concepts.yaml: {cid}"
        _keys(where, entry, {"label", "kind", "phrases", "opposite", "implies", "screen", "resolves"},
              required={"label", "kind", "phrases"})
        if entry.get("screen") not in (None, 0, 1, 2):
            raise CatalogueError(f"{where}: screen must be 0, 1 or 2")
        if entry["kind"] not in KINDS:
            raise CatalogueError(f"{where}: kind {entry['kind']!r} is not one of {', '.join(sorted(KINDS))}")
        phrases = tuple(str(p) for p in entry["phrases"] or ())
        for phrase in phrases:
            _check_phrase(phrase, where)
        concepts[str(cid)] = Concept(str(cid), str(entry["label"]), entry["kind"], phrases,
                                     entry.get("opposite"), tuple(entry.get("implies") or ()), entry.get("screen"),
                                     tuple(entry.get("resolves") or ()))
    for concept in concepts.values():
        for ref in (*concept.implies, *concept.resolves, *([concept.opposite] if concept.opposite else [])):
            if ref not in concepts:
                raise CatalogueError(f"concepts.yaml: {concept.id}: refers to unknown concept {ref!r}")
        if concept.opposite and concept.kind != "normal":
            raise CatalogueError(f"concepts.yaml: {concept.id}: only a 'normal' concept has an opposite")
    return concepts


def _check_phrase(phrase: str, where: str) -> None:
    try:
        compile_phrase(phrase, word_norms)
    except PhraseError as error:
        raise CatalogueError(f"{where}: {error}") from error


def _context(data: dict[str, Any]) -> tuple[tuple[CueSpec, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    _keys("context.yaml", data, {"cues", "terminators", "pseudo", "excluded_medspacy_defaults"},
          required={"cues", "terminators", "pseudo"})
    cues = []
    for i, entry in enumerate(data["cues"]):
        where = f"context.yaml: cue {i + 1} ({entry.get('phrase')!r})"
        _keys(where, entry, {"phrase", "category", "direction", "uncertain", "window", "with_negation",
                                    "across_clauses", "when_caller_is_patient"},
              required={"phrase", "category", "direction"})
        if entry["category"] not in CUE_CATEGORIES or entry["direction"] not in DIRECTIONS:
            raise CatalogueError(f"{where}: category must be one of {sorted(CUE_CATEGORIES)}, direction one of "
                                 f"{sorted(DIRECTIONS)}")
        _check_phrase(str(entry["phrase"]), where)
        cues.append(CueSpec(str(entry["phrase"]), entry["category"], entry["direction"], bool(entry.get("uncertain")),
                            int(entry.get("window", DEFAULT_WINDOW)), bool(entry.get("with_negation")),
                            bool(entry.get("across_clauses")), bool(entry.get("when_caller_is_patient"))))
    terminators, pseudo = tuple(str(t) for t in data["terminators"]), tuple(str(p) for p in data["pseudo"])
    for phrase in (*terminators, *pseudo):
        _check_phrase(phrase, "context.yaml")
    excluded = tuple(str(e["literal"]) for e in data.get("excluded_medspacy_defaults") or ())
    return tuple(cues), terminators, pseudo, excluded


def _reading(data: dict[str, Any]) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
    _keys("reading.yaml", data, {"spellings", "speaker_tags"}, required={"spellings", "speaker_tags"})
    spellings = tuple((str(k).lower(), str(v).lower()) for k, v in (data["spellings"] or {}).items())
    for word, replacement in spellings:
        if not replacement.strip() or " " in word:
            raise CatalogueError(f"reading.yaml: spellings: {word!r} -> {replacement!r}: one word to one or more")
    return spellings, tuple(str(t).lower() for t in data["speaker_tags"] or ())


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


def _refs(items: Any, concepts: Mapping[str, Concept], where: str, default: str = "") -> tuple[ConceptRef, ...]:
    if isinstance(items, str):
        items = [items]
    refs = []
    for item in items or ():
        name, _, scope = str(item).partition("@")
        if name not in concepts:
            raise CatalogueError(f"{where}: unknown concept {name!r}")
        if scope not in SCOPES:
            raise CatalogueError(f"{where}: {item!r}: scope must be one of @{', @'.join(s for s in SCOPES if s)}")
        statuses = SCOPES[scope or default]
        if not scope and concepts[name].kind in PERSISTENT_KINDS:
            statuses = SCOPES["any"]  # "had a heart attack in 2019", "a transplant last year": a risk now
        refs.append(ConceptRef(name, statuses))
    return tuple(refs)


def _condition(entry: Any, concepts: Mapping[str, Concept], where: str, default: str = "") -> Condition:
    _keys(where, entry, {"all", "any", "none", "age", "sex", "vitals"})
    groups = tuple(_refs(group, concepts, where, default) for group in entry.get("all") or ())
    vitals = []
    for name, test in (entry.get("vitals") or {}).items():
        if name not in VITALS:
            raise CatalogueError(f"{where}: unknown vital {name!r} (known: {', '.join(sorted(VITALS))})")
        vitals.append((name, parse_range(test, f"{where}: {name}")))
    if entry.get("sex") not in (None, "female", "male"):
        raise CatalogueError(f"{where}: sex must be female or male")
    condition = Condition(
        groups, _refs(entry.get("any"), concepts, where, default), _refs(entry.get("none"), concepts, where),
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
                          _condition(entry["when"], concepts, where, "recent" if entry["point"] == "B" else ""),
                          _sources(entry, sources, where)))
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
        rules.append(ResourceRule(str(entry["id"]), str(entry["complaint"]), _condition(entry["when"], concepts, where, "recent"),
                                  resources, _sources(entry, sources, where)))
    _unique([r.id for r in rules], "resources.yaml")
    return tuple(rules)


def _measured(data: dict[str, Any], concepts: Mapping[str, Concept], sources: Mapping[str, str]
              ) -> tuple[tuple[str, str, Range], ...]:
    if "measured" not in data:
        return ()
    where = "vitals.yaml: measured"
    _keys(where, data["measured"], {"source", "findings"}, required={"source", "findings"})
    _sources(data["measured"], sources, where)
    out = []
    for concept, tests in data["measured"]["findings"].items():
        if concept not in concepts:
            raise CatalogueError(f"{where}: unknown concept {concept!r}")
        for vital, test in tests.items():
            if vital not in VITALS:
                raise CatalogueError(f"{where}: {concept}: unknown vital {vital!r}")
            out.append((str(concept), str(vital), parse_range(test, f"{where}: {concept}")))
    return tuple(out)


def _screen(data: dict[str, Any], sources: Mapping[str, str]) -> tuple[tuple[str, Range], ...]:
    if "screen" not in data:
        return ()
    where = "vitals.yaml: screen"
    _keys(where, data["screen"], {"source", "alarming"}, required={"source", "alarming"})
    _sources(data["screen"], sources, where)
    out = []
    for vital, tests in data["screen"]["alarming"].items():
        if vital not in VITALS:
            raise CatalogueError(f"{where}: unknown vital {vital!r}")
        out.extend((str(vital), parse_range(test, f"{where}: {vital}")) for test in tests)
    return tuple(out)


def _heights(data: dict[str, Any], sources: Mapping[str, str]) -> tuple[tuple[Range, float], ...]:
    if "height_for_age" not in data:
        return ()
    where = "vitals.yaml: height_for_age"
    _keys(where, data["height_for_age"], {"source", "bands"}, required={"source", "bands"})
    _sources(data["height_for_age"], sources, where)
    out = []
    for band in data["height_for_age"]["bands"]:
        _keys(where, band, {"age", "metres"}, required={"age", "metres"})
        out.append((parse_range(band["age"], where), float(band["metres"])))
    return tuple(out)


def _danger_zone(data: dict[str, Any]) -> tuple[tuple[DangerBand, ...], float]:
    _keys("vitals.yaml", data, {"danger_zone", "screen", "measured", "height_for_age"}, required={"danger_zone"})
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
