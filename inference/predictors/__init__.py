"""Triage predictors: the ESI level with its decision point and reasons, and the output-length predictor.

Per call: the explicit ESI algorithm over the clinical catalogue (``inference.clinical``: findings from the
free text, decision points A-D), trained linear heads on [the call's word n-grams, the algorithm's features]
for the level, the dispatch protocol and the guidance length, and the judgement that combines the level with
the algorithm's (``judgement``). This package never imports Django; torch is imported lazily, on the first
load, so importing the API is cheap.

Stable API::

    from inference.predictors import load_triage_predictor
    predictor = load_triage_predictor()          # TRIAGE_PREDICTORS_DIR or <repo>/models/predictors
    [p] = predictor.predict(["he's collapsed and he's not breathing"])
    p.esi, p.decision_point, p.reasons, p.uncertain, p.probabilities, p.predicted_output_tokens
    p.protocol.protocol, p.protocol.confidence, p.protocol.runner_up    # "choking", 0.93, "allergic_reaction"
    predictor.version, predictor.catalogue.label

Build the models with ``python manage.py train_predictors``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from inference.clinical import Catalogue, Findings

    from .esi import EsiClassifier
    from .length import LengthPredictor
    from .ngrams import NgramVectoriser
    from .protocol import ProtocolChoice, ProtocolClassifier

__all__ = [
    "ESI_LEVELS",
    "PredictorsNotBuilt",
    "TriagePrediction",
    "TriagePredictor",
    "default_predictors_dir",
    "load_triage_predictor",
]

ESI_LEVELS = (1, 2, 3, 4, 5)
REPO_ROOT = Path(__file__).resolve().parents[2]


class PredictorsNotBuilt(FileNotFoundError):
    """The predictors directory holds no trained bundle (run ``manage.py train_predictors``)."""


@dataclass(frozen=True)
class TriagePrediction:
    esi: int
    probabilities: tuple[float, float, float, float, float]
    predicted_output_tokens: int
    decision_point: str = "C"  # A | B | C | D: the ESI decision point that decided ``esi``
    reasons: tuple[str, ...] = ()  # "B: fever during chemotherapy", "D: SpO2 89% (danger zone < 92%)"
    uncertain: bool = False  # algorithm and model disagree, or the probability mass is split
    findings: tuple[str, ...] = ()  # what the caller said, as findings ("not breathing", "no fever")
    protocol: ProtocolChoice | None = None  # the dispatch protocol selected, with confidence and runner-up
    patient_age: float | None = None  # years: stated, else the age group's (the guidance names a child "the child")


class TriagePredictor:
    """ESI level with its decision point and reasons, class probabilities and predicted guidance length for a
    batch of transcripts."""

    def __init__(
        self,
        *,
        vectoriser: NgramVectoriser,
        esi: EsiClassifier,
        length: LengthPredictor,
        protocol: ProtocolClassifier,
        catalogue: Catalogue,
        version: str,
    ) -> None:
        self.vectoriser = vectoriser
        self.esi = esi
        self.length = length
        self.protocol = protocol
        self.catalogue = catalogue
        self.version = version

    @property
    def catalogue_version(self) -> str:
        return self.catalogue.label

    def predict(self, transcripts: Sequence[str]) -> list[TriagePrediction]:
        """The algorithm per call, the three heads on one set of inputs, the judgement. Output order follows the
        input; a call's prediction does not depend on the rest of its batch."""
        from .clinical_features import assess_calls, columns
        from .judgement import judge
        from .ngrams import CallInputs

        texts = [str(t) for t in transcripts]
        if not texts:
            return []
        findings, results, active = assess_calls(texts, self.catalogue)
        names = self.esi.feature_names
        inputs = CallInputs(tuple(self.vectoriser.rows(texts)), self.vectoriser.dim, columns(active, names), len(names))
        probabilities = self.esi.probabilities(inputs)  # pure functions of the inputs: safe across threads
        protocols = self.protocol.choices(self.protocol.probabilities(inputs))
        tokens = self.length.predict(inputs)
        levels = self.esi.levels(probabilities)
        out = []
        rows = zip(probabilities.tolist(), levels, results, findings, tokens, protocols, strict=True)
        for row, level, result, found, n, protocol in rows:
            verdict = judge(row, level, result)
            out.append(TriagePrediction(
                esi=verdict.esi, probabilities=_five(row), predicted_output_tokens=int(n),
                decision_point=verdict.decision_point, reasons=verdict.reasons, uncertain=verdict.uncertain,
                findings=describe_findings(found, self.catalogue), protocol=protocol, patient_age=found.patient.age,
            ))
        return out


def describe_findings(findings: Findings, catalogue: Catalogue) -> tuple[str, ...]:
    """Each concept the caller asserted or denied, once, in the catalogue's words: "not breathing",
    "no fever", "possibly: no pulse"."""
    out: dict[str, None] = {}
    for f in findings.items:
        label = catalogue.concepts[f.concept].label
        if f.status == "present":
            out[label] = None
        elif f.status == "possible":
            out[f"possibly: {label}"] = None
        elif f.status == "negated" and not f.derived:
            out[f"denied: {label}"] = None
    return tuple(out)


def _five(row: Sequence[float]) -> tuple[float, float, float, float, float]:
    a, b, c, d, e = (float(x) for x in row)
    return (a, b, c, d, e)


def default_predictors_dir() -> Path:
    """Where the trained bundle lives without Django: the same rule as ``settings.TRIAGE["PREDICTORS_DIR"]``."""
    if os.environ.get("TRIAGE_PREDICTORS_DIR"):
        return Path(os.environ["TRIAGE_PREDICTORS_DIR"])
    models_dir = Path(os.environ.get("TRIAGE_MODELS_DIR", REPO_ROOT / "models"))
    return models_dir / "predictors"


_cache: dict[tuple[Path, int], TriagePredictor] = {}
_cache_lock = threading.Lock()


def load_triage_predictor(path: str | Path | None = None) -> TriagePredictor:
    """Load (once per process and bundle version on disk) the trained predictors from ``path``."""
    from .bundle import MANIFEST_NAME, read_bundle

    directory = (Path(path) if path is not None else default_predictors_dir()).resolve()
    manifest = directory / MANIFEST_NAME
    if not manifest.is_file():
        raise PredictorsNotBuilt(
            f"no trained predictors in {directory} (missing {MANIFEST_NAME}); "
            "run `python manage.py train_predictors` first"
        )
    key = (directory, manifest.stat().st_mtime_ns)
    with _cache_lock:
        if key not in _cache:
            _cache[key] = read_bundle(directory)
        return _cache[key]
