"""How well calls are read: asserted findings and their assertions against fixtures/evaluation/findings/, whose
calls were annotated by authors who never saw the catalogue (docs/findings-annotation-guide.md).

Scored per call, on what a dispatcher is shown: the findings asserted for the patient now (present or
possible). Precision: of the findings we assert, the share the annotators assert; recall: the reverse;
assertion accuracy: of the findings both sides mention, the share with the same assertion. The annotators'
findings are closed under the catalogue's ``implies`` (a heavy bleed is a bleed), as ours are. A concept with
two assertions in one call counts as a contradiction. Pure functions of the records and the read findings.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from judgment.clinical.catalogue import Catalogue

FINDINGS_SET = Path(__file__).resolve().parents[1] / "fixtures" / "evaluation" / "findings"
ASSERTED = frozenset({"present", "possible"})
# When a concept is mentioned with several assertions, the one a call is scored by (old readers gave several).
ORDER = ("present", "possible", "negated", "resolved", "historical", "hypothetical", "other_person", "question")


def load_findings_set(root: Path = FINDINGS_SET) -> tuple[list[dict[str, Any]], dict[str, tuple[str, ...]]]:
    """The annotated calls and the map from the guide's finding ids to catalogue concepts."""
    mapping = yaml.safe_load((root / "concepts.yaml").read_text(encoding="utf-8"))["findings"]
    records = [__import__("json").loads(line) for path in sorted(root.glob("*.jsonl"))
               for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return records, {k: tuple(v) for k, v in mapping.items()}


def _closure(statuses: Mapping[str, str], catalogue: Catalogue) -> dict[str, str]:
    out = dict(statuses)
    frontier = list(statuses.items())
    while frontier:
        concept, status = frontier.pop()
        for implied in catalogue.concepts[concept].implies:
            if implied not in out:
                out[implied] = status
                frontier.append((implied, status))
    return out


def _by_finding(concepts: Mapping[str, set[str]], mapping: Mapping[str, Sequence[str]]) -> dict[str, set[str]]:
    """Each guide finding's assertions: those of any concept it maps to."""
    out: dict[str, set[str]] = {}
    for finding, targets in mapping.items():
        found = set().union(*(concepts.get(c, set()) for c in targets))
        if found:
            out[finding] = found
    return out


def score_findings(
    records: Iterable[Mapping[str, Any]],
    read: Callable[[str], Iterable[tuple[str, str]]],
    mapping: Mapping[str, Sequence[str]],
    catalogue: Catalogue,
) -> dict[str, Any]:
    """``read(transcript)`` yields (concept, status) for every finding a reader gives the call (derived ones too)."""
    tp = fp = fn = agree = both = contradictions = n = 0
    confusion: Counter[tuple[str, str]] = Counter()
    for record in records:
        n += 1
        ours: dict[str, set[str]] = {}
        for concept, status in read(record["transcript"]):
            ours.setdefault(concept, set()).add(status)
        contradictions += any(len(s) > 1 for s in ours.values())
        gold_concepts: dict[str, str] = {}
        for finding, status in record["findings"].items():
            for concept in mapping[finding][:1]:
                gold_concepts[concept] = status
        gold = _by_finding({c: {s} for c, s in _closure(gold_concepts, catalogue).items()}, mapping)
        gold = {f: s for f, s in gold.items() if f in record["findings"] or s <= ASSERTED}
        mine = _by_finding(ours, mapping)
        asserted_gold = {f for f, s in gold.items() if s & ASSERTED}
        asserted_mine = {f for f, s in mine.items() if s & ASSERTED}
        tp += len(asserted_gold & asserted_mine)
        fp += len(asserted_mine - asserted_gold)
        fn += len(asserted_gold - asserted_mine)
        for finding in set(gold) & set(mine):
            if finding not in record["findings"]:
                continue
            both += 1
            truth = record["findings"][finding]
            given = min(mine[finding], key=ORDER.index) if len(mine[finding]) == 1 else "several"
            agree += given == truth
            confusion[(truth, given)] += 1
    return {
        "calls": n,
        "precision": tp / (tp + fp) if tp + fp else 0.0,
        "recall": tp / (tp + fn) if tp + fn else 0.0,
        "assertion_accuracy": agree / both if both else 0.0,
        "assertions_compared": both,
        "calls_with_contradictions": contradictions,
        "assertion_confusion": {f"{t} -> {g}": k for (t, g), k in sorted(confusion.items()) if t != g},
    }
