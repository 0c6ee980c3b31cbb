"""Training of the triage predictors: load the corpus, embed, fit both heads (seeded), tune the decision
rule on out-of-fold predictions of TRAIN (folds grouped by template), evaluate on TEST through the saved bundle, write the model card.

    from inference.predictors.training import FULL, train
    metrics = train(FULL, out_dir=Path("models/predictors"))
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import random
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from . import REPO_ROOT, TriagePrediction, TriagePredictor
from .bundle import read_bundle, write_bundle
from .embedding import BUNDLED_MINILM, SentenceEncoder
from .esi import EsiClassifier, cap_danger_zone, decide_levels, esi_inputs, mix
from .evaluation import esi_metrics, length_metrics, objective
from .fitting import HeadConfig, fit_esi_head, fit_length_head, fit_ngram_head, tune_thresholds
from .length import LengthPredictor
from .length_labels import length_labels
from .lexical import danger_zone_vitals
from .model_card import render_model_card
from .ngrams import DEFAULT_BUCKETS

DEFAULT_CORPUS = REPO_ROOT / "fixtures" / "calls" / "calls.jsonl"
Record = dict[str, Any]
NGRAM_WEIGHT_GRID = (0.0, 0.25, 0.5, 0.75, 1.0)


@dataclass(frozen=True)
class TrainingConfig:
    name: str
    esi: HeadConfig
    length: HeadConfig
    ngram_c: float | None = None  # inverse L2 strength of the linear n-gram head; None: the embedding head alone
    ngram_buckets: int = DEFAULT_BUCKETS
    ngram_weights: tuple[float, ...] = NGRAM_WEIGHT_GRID  # mixing weights tried on out-of-fold predictions
    seed: int = 20261122
    folds: int = 5  # template-grouped folds of TRAIN whose out-of-fold predictions tune the thresholds
    train_limit: int | None = None  # a stratified subset, for the tiny config
    test_limit: int | None = None
    encoder: str = BUNDLED_MINILM
    max_length: int = 256
    threads: int = 2
    extra: dict[str, Any] = field(default_factory=dict)


FULL = TrainingConfig(
    name="full",
    esi=HeadConfig(hidden=256, dropout=0.2, epochs=40, lr=3e-3, weight_decay=1e-2, batch_size=128),
    length=HeadConfig(hidden=128, dropout=0.1, epochs=40, lr=3e-3, weight_decay=1e-2, batch_size=128),
    ngram_c=10.0,
)
TINY = TrainingConfig(
    name="tiny",
    esi=HeadConfig(hidden=128, dropout=0.1, epochs=20, lr=3e-3, weight_decay=1e-2, batch_size=64),
    length=HeadConfig(hidden=64, dropout=0.1, epochs=20, lr=3e-3, weight_decay=1e-2, batch_size=64),
    ngram_c=10.0,
    ngram_buckets=1 << 13,
    train_limit=300,
    test_limit=120,
)
CONFIGS = {"full": FULL, "tiny": TINY}


# ----------------------------------------------------------------------------- corpus
def load_corpus(path: Path = DEFAULT_CORPUS) -> list[Record]:
    with path.open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def stratified_subset(records: Sequence[Record], limit: int | None, seed: int) -> list[Record]:
    """``limit`` records with the ESI mix of ``records`` (all of them when limit is None), in corpus order."""
    if limit is None or limit >= len(records):
        return list(records)
    rng = random.Random(seed)
    chosen: list[Record] = []
    for level in sorted({r["esi"] for r in records}):
        pool = [r for r in records if r["esi"] == level]
        chosen += rng.sample(pool, max(1, round(limit * len(pool) / len(records))))
    keep = {r["id"] for r in chosen}
    return [r for r in records if r["id"] in keep]


def training_records(corpus: Sequence[Record], config: TrainingConfig) -> list[Record]:
    return stratified_subset([r for r in corpus if r["split"] == "train"], config.train_limit, config.seed)


def evaluation_records(corpus: Sequence[Record], config: TrainingConfig) -> list[Record]:
    """The TEST records a config is evaluated on (the whole test split for the full config)."""
    return stratified_subset([r for r in corpus if r["split"] == "test"], config.test_limit, config.seed + 1)


def template_folds(train: Sequence[Record], k: int, seed: int) -> list[int]:
    """A fold (0..k-1) per record, grouped by template: each scenario-severity variant's templates are dealt
    round-robin over the folds (seeded shuffle and offset), so every fold holds out whole templates of (nearly)
    every variant and no template is split between folds."""
    by_variant: dict[str, set[str]] = {}
    for r in train:
        by_variant.setdefault(r["template_id"].rsplit(".", 1)[0], set()).add(r["template_id"])
    fold_of: dict[str, int] = {}
    for variant, templates in sorted(by_variant.items()):
        order = sorted(templates)
        rng = random.Random(f"{seed}:folds:{variant}")
        rng.shuffle(order)
        offset = rng.randrange(k)
        fold_of.update({t: (i + offset) % k for i, t in enumerate(order)})
    return [fold_of[r["template_id"]] for r in train]


# ----------------------------------------------------------------------------- helpers
@contextlib.contextmanager
def deterministic(seed: int, threads: int) -> Iterator[None]:
    previous_threads, previous_mode = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(seed)
    try:
        yield
    finally:
        torch.set_num_threads(previous_threads)
        torch.use_deterministic_algorithms(previous_mode)


def predict_records(predictor: TriagePredictor, records: Sequence[Record], chunk: int = 256) -> list[TriagePrediction]:
    """Serving-path predictions in fixed chunks (the same chunks give bitwise the same embeddings)."""
    out: list[TriagePrediction] = []
    for start in range(0, len(records), chunk):
        out += predictor.predict([r["transcript"] for r in records[start : start + chunk]])
    return out


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _esi_tensor(records: Sequence[Record]) -> torch.Tensor:
    return torch.tensor([int(r["esi"]) for r in records])


# ----------------------------------------------------------------------------- the heads
def train_esi(
    encoder: SentenceEncoder, train: Sequence[Record], config: TrainingConfig
) -> tuple[EsiClassifier, dict[str, Any]]:
    """Out-of-fold predictions of TRAIN (K folds grouped by template; each fold's heads, idf included, fitted
    exactly like the shipped ones on the other folds) choose the n-gram mixing weight and tune the thresholds;
    then the shipped heads are fitted on all of TRAIN."""
    texts = [r["transcript"] for r in train]
    x, y = esi_inputs(encoder.encode_calls(texts), texts), _esi_tensor(train)
    folds = template_folds(train, config.folds, config.seed)
    oof = torch.zeros((len(train), 5), dtype=torch.float64)
    oof_ngrams = torch.zeros((len(train), 5), dtype=torch.float64) if config.ngram_c is not None else None
    for k in range(config.folds):
        fit = [i for i, f in enumerate(folds) if f != k]
        held = [i for i, f in enumerate(folds) if f == k]
        if not held or not fit:
            continue
        fold_head = fit_esi_head(x[fit], y[fit], config.esi, config.seed)
        with torch.inference_mode():
            oof[held] = torch.softmax(fold_head(x[held]), dim=1).double()
        if config.ngram_c is not None and oof_ngrams is not None:
            fold_ngrams = fit_ngram_head([texts[i] for i in fit], y[fit], config.ngram_c, config.seed, config.ngram_buckets)
            with torch.inference_mode():
                oof_ngrams[held] = torch.softmax(fold_ngrams.logits([texts[i] for i in held]), dim=1).double()
    true = y.tolist()
    danger = danger_zone_vitals(texts)
    weights = config.ngram_weights if oof_ngrams is not None else (0.0,)
    candidates = []  # (objective, -weight, weight, thresholds): ties keep the smaller n-gram weight
    for weight in weights:
        mixed = mix(oof, oof_ngrams, weight)
        thresholds = tune_thresholds(mixed, true, danger)
        levels = cap_danger_zone(decide_levels(mixed, thresholds).tolist(), danger)
        candidates.append((objective(esi_metrics(true, levels)), -weight, weight, thresholds))
    _, _, weight, thresholds = max(candidates)
    mixed = mix(oof, oof_ngrams, weight)
    validation = {
        "method": f"{config.folds}-fold out-of-fold predictions of TRAIN, folds grouped by template",
        "folds": config.folds,
        "n_validation": len(train),
        "validation_templates": len({r["template_id"] for r in train}),
        "ngram_weight": weight,
        "ngram_weights_tried": {str(w): round(score, 6) for score, _, w, _ in candidates},
        "tuned": esi_metrics(true, cap_danger_zone(decide_levels(mixed, thresholds).tolist(), danger)),
        "argmax": esi_metrics(true, (mixed.argmax(dim=1) + 1).tolist()),
        "embedding_only_argmax": esi_metrics(true, (oof.argmax(dim=1) + 1).tolist()),
    }
    head = fit_esi_head(x, y, config.esi, config.seed)
    ngram_head = None
    if config.ngram_c is not None and weight > 0:
        ngram_head = fit_ngram_head(texts, y, config.ngram_c, config.seed, config.ngram_buckets)
    classifier = EsiClassifier(head, thresholds, ngram_head=ngram_head, ngram_weight=weight)  # type: ignore[arg-type]
    return classifier, validation


def train_length(
    encoder: SentenceEncoder, train: Sequence[Record], labels: dict[str, int], config: TrainingConfig
) -> LengthPredictor:
    rows = [r for r in train if r["id"] in labels]
    if not rows:
        raise ValueError("no length labels for any training call")
    log_tokens = torch.tensor([math.log(labels[r["id"]]) for r in rows], dtype=torch.float32)
    mean, std = float(log_tokens.mean()), float(log_tokens.std().clamp(min=1e-3)) if len(rows) > 1 else 1.0
    x = encoder.encode_calls([r["transcript"] for r in rows])
    head = fit_length_head(x, (log_tokens - mean) / std, config.length, config.seed)
    return LengthPredictor(head, mean, std, max_tokens=2 * max(labels[r["id"]] for r in rows))


# ----------------------------------------------------------------------------- evaluation
def evaluate(
    predictions: Sequence[TriagePrediction], records: Sequence[Record], labels: dict[str, int], baseline_tokens: int
) -> dict[str, Any]:
    """The TEST numbers of the model card, from serving-path predictions."""
    true = [int(r["esi"]) for r in records]
    argmax = [max(range(5), key=lambda k, p=p: p.probabilities[k]) + 1 for p in predictions]
    labelled = [(labels[r["id"]], p.predicted_output_tokens) for r, p in zip(records, predictions, strict=True)
                if r["id"] in labels]
    return {
        "esi": esi_metrics(true, [p.esi for p in predictions]),
        "esi_argmax": esi_metrics(true, argmax),
        "length": length_metrics([t for t, _ in labelled], [p for _, p in labelled], baseline_tokens),
    }


def train(
    config: TrainingConfig = FULL,
    *,
    out_dir: Path,
    corpus_path: Path = DEFAULT_CORPUS,
    lengths_path: Path | None = None,
    log: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Train, save the bundle in ``out_dir``, evaluate on TEST, write metrics.json and MODEL_CARD.md."""
    started = time.perf_counter()
    with deterministic(config.seed, config.threads):
        corpus = load_corpus(corpus_path)
        train_set, test_set = training_records(corpus, config), evaluation_records(corpus, config)
        log(f"{config.name}: {len(train_set)} train / {len(test_set)} test calls; embedding…")
        encoder = SentenceEncoder(config.encoder, max_length=config.max_length, memoise=True)
        esi, validation = train_esi(encoder, train_set, config)
        labels, label_source = length_labels([*train_set, *test_set], lengths_path, encoder.count_tokens)
        length = train_length(encoder, train_set, labels, config)
        version = write_bundle(out_dir, esi=esi, length=length, manifest=_manifest(config, label_source, encoder.dim))
        trained_s = time.perf_counter() - started
        log(f"trained {version} in {trained_s:.1f} s; evaluating on TEST through the saved bundle…")
        predictions = predict_records(read_bundle(out_dir), test_set)
        baseline = round(statistics.median(labels[r["id"]] for r in train_set if r["id"] in labels))
        metrics = {
            "version": version,
            "config": asdict(config),
            "corpus": _corpus_facts(corpus_path, corpus, train_set, test_set),
            "length_label_source": label_source,
            "thresholds": list(esi.thresholds),
            "validation": validation,
            "test": evaluate(predictions, test_set, labels, baseline),
            "timing": {"train_s": round(trained_s, 1), "total_s": round(time.perf_counter() - started, 1)},
        }
    (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=2, sort_keys=True) + "\n")
    (out_dir / "MODEL_CARD.md").write_text(render_model_card(metrics))
    return metrics


def _manifest(config: TrainingConfig, label_source: str, embedding_dim: int) -> dict[str, Any]:
    return {
        "encoder": config.encoder,
        "embedding_dim": embedding_dim,
        "pooling": "clause mean+max",
        "call_feature_dim": 2 * embedding_dim,
        "max_length": config.max_length,
        "config": config.name,
        "esi": {"hidden": config.esi.hidden, "dropout": config.esi.dropout},
        "length": {"hidden": config.length.hidden, "dropout": config.length.dropout, "label_source": label_source},
    }


def _corpus_facts(path: Path, corpus: list[Record], train_set: list[Record], test_set: list[Record]) -> dict[str, Any]:
    return {
        "path": str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path),
        "sha256": file_sha256(path),
        "calls": len(corpus),
        "train_calls": len(train_set),
        "test_calls": len(test_set),
        "train_templates": len({r["template_id"] for r in train_set}),
        "test_templates": len({r["template_id"] for r in test_set}),
    }
