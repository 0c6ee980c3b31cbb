"""Triage predictors: the ESI urgency classifier and the output-length predictor.

Both are small trained heads on all-MiniLM-L6-v2 sentence embeddings (one batched embedding pass per
``predict`` call). This package never imports Django; torch and transformers are imported lazily, on the
first load, so importing the API is cheap.

Stable API::

    from inference.predictors import load_triage_predictor
    predictor = load_triage_predictor()          # TRIAGE_PREDICTORS_DIR or <repo>/models/predictors
    [p] = predictor.predict(["he's collapsed and he's not breathing"])
    p.esi, p.probabilities, p.predicted_output_tokens, predictor.version

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
    from .embedding import SentenceEncoder
    from .esi import EsiClassifier
    from .length import LengthPredictor

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


class TriagePredictor:
    """ESI level, class probabilities and predicted guidance length for a batch of transcripts."""

    def __init__(
        self,
        *,
        encoder: SentenceEncoder,
        esi: EsiClassifier,
        length: LengthPredictor,
        version: str,
    ) -> None:
        self.encoder = encoder
        self.esi = esi
        self.length = length
        self.version = version
        self._lock = threading.Lock()

    def predict(self, transcripts: Sequence[str]) -> list[TriagePrediction]:
        """One batched embedding pass, then both heads. Order of the output follows the input."""
        texts = [str(t) for t in transcripts]
        if not texts:
            return []
        with self._lock:  # torch modules are not re-entrant across threads sharing one predictor
            features = self.encoder.encode_calls(texts)
            probabilities, levels = self.esi.predict(features, texts)
            tokens = self.length.predict(features)
        return [
            TriagePrediction(esi=int(level), probabilities=_five(row), predicted_output_tokens=int(n))
            for level, row, n in zip(levels, probabilities, tokens, strict=True)
        ]


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
