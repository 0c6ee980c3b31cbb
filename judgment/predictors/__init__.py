"""Triage predictors: the ESI level with its decision point and reasons, and the output-length predictor.

Per call: the explicit ESI algorithm over the clinical catalogue (``judgment.clinical``: findings from the
free text, decision points A-D), trained linear heads on [the call's word n-grams, the algorithm's features]
for the level, the dispatch protocol and the guidance length, and the judgement that combines the level with
the algorithm's (``judgement``). This package never imports Django; torch is imported lazily, on the first
load, so importing the API is cheap.

Stable API::

    from judgment.predictors import load_triage_predictor
    predictor = load_triage_predictor()          # TRIAGE_PREDICTORS_DIR or <repo>/models/predictors
    [p] = predictor.predict(["he's collapsed and he's not breathing"])
    p.esi, p.decision_point, p.reasons, p.uncertain, p.alternative_esi, p.probabilities, p.predicted_output_tokens
    p.protocol.protocol, p.protocol.confidence, p.protocol.runner_up    # "choking", 0.93, "allergic_reaction"
    predictor.version, predictor.catalogue.label

Build the models with ``python manage.py train_predictors``.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from scheduler.config import ESI_LEVELS

from .predictor import TriagePrediction, TriagePredictor, describe_findings

__all__ = [
    "ESI_LEVELS",
    "PredictorsNotBuilt",
    "TriagePrediction",
    "TriagePredictor",
    "default_predictors_dir",
    "describe_findings",
    "load_triage_predictor",
]

REPO_ROOT = Path(__file__).resolve().parents[2]


class PredictorsNotBuilt(FileNotFoundError):
    """The predictors directory holds no trained bundle (run ``manage.py train_predictors``)."""


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
