"""Clinical knowledge applied to a call: the catalogue (fixtures/clinical/), findings from free text (read with
spaCy and medspaCy), and the ESI algorithm's decision points A-D with their reasons. No torch, no Django.

    from judgment.clinical import assess_call, load_catalogue
    catalogue = load_catalogue()
    findings, result = assess_call("my dad's collapsed and he isn't breathing", catalogue)
    result.level, result.decision_point, [str(r) for r in result.reasons]   # 1, "A", ["A: not breathing or no pulse"]
"""

from __future__ import annotations

from .algorithm import AlgorithmResult, Reason, matches, run_algorithm
from .catalogue import Catalogue, CatalogueError, default_catalogue_dir, load_catalogue
from .findings import Finding, Findings, extract_findings, extract_many


def assess_call(transcript: str, catalogue: Catalogue) -> tuple[Findings, AlgorithmResult]:
    findings = extract_findings(transcript, catalogue)
    return findings, run_algorithm(findings, catalogue)


__all__ = [
    "AlgorithmResult", "Catalogue", "CatalogueError", "Finding", "Findings", "Reason", "assess_call",
    "default_catalogue_dir", "extract_findings", "extract_many", "load_catalogue", "matches", "run_algorithm",
]
