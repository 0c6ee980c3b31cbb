"""Training of the triage predictors, and their evaluation on data written independently of the training data.

- ESI: the explicit algorithm's features (``clinical_features``) and the word n-grams (TF-IDF, ``ngrams``) of
  each call of the written corpus (``fixtures/calls/written/``, one file per author), a logistic regression on
  both; its decision thresholds are tuned on out-of-fold predictions (one fold per author, judged with the
  algorithm as served), then the head is fitted on all of it.
- Protocol: a logistic regression on the same inputs, its confidence threshold tuned the same way.
- Output length: ridge regression on the same n-grams, labelled with the guidance LLM's measured output length
  for each written call (``build_models``), else with the length of the protocol text it would read out.
- Evaluation through the saved bundle, side by side: the independent evaluation set
  (``fixtures/evaluation/independent/``, never trained or tuned on), the development set, the written corpus
  out of fold (the in-distribution number), and the template corpus' test split (ESI only).

    from training.predictors.pipeline import FULL, train
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

from judgment.clinical import AlgorithmResult, Catalogue, load_catalogue
from judgment.predictors import REPO_ROOT, TriagePrediction, TriagePredictor
from judgment.predictors.bundle import read_bundle, write_bundle
from judgment.predictors.clinical_features import assess_calls, columns, feature_names
from judgment.predictors.esi import EsiClassifier, decide_levels
from judgment.predictors.judgement import judge
from judgment.predictors.length import LengthPredictor
from judgment.predictors.ngrams import CallInputs, NgramVectoriser
from judgment.protocols import load_library
from training.predictors.evaluation import (
    calibration,
    decision_point_agreement,
    esi_metrics,
    length_metrics,
    protocol_metrics,
)
from training.predictors.fitting import (
    HeadConfig,
    fit_esi_head,
    fit_length_head,
    oof_method,
    out_of_fold,
    train_protocol,
    tune_thresholds,
)
from training.predictors.length_labels import length_labels
from training.predictors.model_card import render_model_card, render_reliability

DEFAULT_CORPUS = REPO_ROOT / "fixtures" / "calls" / "calls.jsonl"  # the template corpus: a reference point
WRITTEN_CORPUS = REPO_ROOT / "fixtures" / "calls" / "written"  # the ESI training corpus
EVALUATION_DIR = REPO_ROOT / "fixtures" / "evaluation"
EVALUATION_SETS = ("independent-3", "independent-2", "independent", "development")  # newest judge first
FINDINGS_SETS = ("findings", "findings-development")  # annotated findings: how calls are read
Record = dict[str, Any]


@dataclass(frozen=True)
class TrainingConfig:
    name: str
    esi: HeadConfig
    length: HeadConfig
    protocol: HeadConfig
    seed: int = 20261122
    train_limit: int | None = None  # a stratified subset of the written corpus, for the tiny config
    test_limit: int | None = None  # of the template corpus' test split
    eval_limit: int | None = None  # of each evaluation set
    max_n: int = 2  # word n-grams up to pairs
    min_df: int = 3  # a term enters the vocabulary when this many training calls use it
    threads: int = 2
    extra: dict[str, Any] = field(default_factory=dict)


FULL = TrainingConfig(
    name="full",
    esi=HeadConfig(l2=1e-5, clinical_weight=0.1),
    length=HeadConfig(l2=1e-4),
    # Balanced class weights and the clinical features: 13 % lower out-of-fold cost (wrong-and-confident x 4 +
    # unclear) than square-root weights on n-grams alone (docs/decisions/protocol-selection.md).
    protocol=HeadConfig(l2=3e-6, class_weight_power=1.0, clinical_weight=0.1),
)
TINY = TrainingConfig(
    name="tiny",
    esi=HeadConfig(l2=1e-4, clinical_weight=0.1),
    length=HeadConfig(l2=1e-3),
    protocol=HeadConfig(l2=1e-4, class_weight_power=0.5),
    min_df=2,
    train_limit=300,
    test_limit=120,
    eval_limit=80,
)
CONFIGS = {"full": FULL, "tiny": TINY}


# ----------------------------------------------------------------------------- corpus
def load_corpus(path: Path = DEFAULT_CORPUS) -> list[Record]:
    """JSONL records from a file, or from every ``*.jsonl`` file of a directory in name order."""
    files = sorted(path.glob("*.jsonl")) if path.is_dir() else [path]
    records = []
    for file in files:
        with file.open(encoding="utf-8") as lines:
            records += [json.loads(line) for line in lines if line.strip()]
    return records


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


def esi_training_records(config: TrainingConfig, path: Path = WRITTEN_CORPUS) -> list[Record]:
    return stratified_subset(load_corpus(path), config.train_limit, config.seed)


def evaluation_records(corpus: Sequence[Record], config: TrainingConfig) -> list[Record]:
    """The template corpus' test split (whole for the full config)."""
    return stratified_subset([r for r in corpus if r["split"] == "test"], config.test_limit, config.seed + 1)


def evaluation_set(name: str, config: TrainingConfig, root: Path = EVALUATION_DIR) -> list[Record]:
    """An independently written evaluation set (``independent`` or ``development``), whole for the full config."""
    return stratified_subset(load_corpus(root / name), config.eval_limit, config.seed + 2)


def protocol_families() -> dict[str, str]:
    """Each protocol id's family, from the protocol library (the model card's confusion table groups by it)."""
    return {p.id: p.family for p in load_library().protocols.values()}


MAX_FOLDS = 6  # 18 authors: three a fold; every held-out call was written by someone its head never read


def author_folds(records: Sequence[Record], max_folds: int = MAX_FOLDS) -> list[int]:
    """Folds by author: the written corpus' ids start with the author ("w3-017"); the authors, in sorted order,
    are dealt round the folds, so a fold holds out every call of its authors."""
    authors = sorted({r["id"].split("-")[0] for r in records})
    return [authors.index(r["id"].split("-")[0]) % max_folds for r in records]


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
    """Serving-path predictions in fixed chunks."""
    out: list[TriagePrediction] = []
    for start in range(0, len(records), chunk):
        out += predictor.predict([r["transcript"] for r in records[start : start + chunk]])
    return out


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _esi_tensor(records: Sequence[Record]) -> torch.Tensor:
    return torch.tensor([int(r["esi"]) for r in records])


# ----------------------------------------------------------------------------- the heads
def call_inputs(
    vectoriser: NgramVectoriser, catalogue: Catalogue, texts: Sequence[str], names: Sequence[str]
) -> tuple[CallInputs, list[AlgorithmResult]]:
    """The heads' inputs for ``texts`` and the algorithm's result per call."""
    _, results, active = assess_calls(texts, catalogue)
    inputs = CallInputs(tuple(vectoriser.rows(texts)), vectoriser.dim, columns(active, names), len(names))
    return inputs, results


def judged_levels(
    probabilities: torch.Tensor, thresholds: Sequence[float], results: Sequence[AlgorithmResult]
) -> list[int]:
    levels = decide_levels(probabilities, thresholds).tolist()
    return [judge(row, level, result).esi for row, level, result in zip(probabilities.tolist(), levels, results, strict=True)]


def train_esi(
    inputs: CallInputs, results: Sequence[AlgorithmResult], names: Sequence[str], train: Sequence[Record],
    config: TrainingConfig,
) -> tuple[EsiClassifier, dict[str, Any]]:
    """Out-of-fold predictions (folds by author; each fold's head fitted exactly like the shipped one on the
    other authors) tune the thresholds of the whole judgement; then the shipped head is fitted on all of it.
    ``inputs``, ``results``: the heads' inputs and the algorithm's results for ``train`` (``call_inputs``)."""
    y = _esi_tensor(train)
    folds = author_folds(train)
    oof = out_of_fold(inputs, y, folds, 5, lambda xs, ys: fit_esi_head(xs, ys, config.esi), config.esi.clinical_weight)
    true = y.tolist()
    thresholds = tune_thresholds(oof, true, decide=lambda t: judged_levels(oof, t, results))
    algorithm = [r.level for r in results]
    validation = {
        "method": oof_method(folds),
        "folds": len(set(folds)),
        "n_validation": len(train),
        "tuned": esi_metrics(true, judged_levels(oof, thresholds, results)),
        "argmax": esi_metrics(true, (oof.argmax(dim=1) + 1).tolist()),
        "algorithm_coverage": sum(a is not None for a in algorithm) / len(algorithm),
        "algorithm_alone": esi_metrics(*zip(*[(t, a) for t, a in zip(true, algorithm, strict=True) if a is not None],
                                            strict=True)) if any(a is not None for a in algorithm) else None,
    }
    head = fit_esi_head(inputs, y, config.esi)
    return EsiClassifier(head, thresholds, tuple(names), config.esi.clinical_weight), validation  # type: ignore[arg-type]


def train_length(
    inputs: CallInputs, train: Sequence[Record], labels: dict[str, int], config: TrainingConfig
) -> LengthPredictor:
    """``inputs``: the heads' inputs for ``train`` (``call_inputs``); ``labels``: output tokens by call id."""
    rows = [i for i, r in enumerate(train) if r["id"] in labels]
    if not rows:
        raise ValueError("no length labels for any training call")
    log_tokens = torch.tensor([math.log(labels[train[i]["id"]]) for i in rows], dtype=torch.float32)
    mean, std = float(log_tokens.mean()), float(log_tokens.std().clamp(min=1e-3)) if len(rows) > 1 else 1.0
    head = fit_length_head(inputs.subset(rows), (log_tokens - mean) / std, config.length)
    return LengthPredictor(head, mean, std, max_tokens=2 * max(labels[train[i]["id"]] for i in rows))


# ----------------------------------------------------------------------------- evaluation
def evaluate(
    predictions: Sequence[TriagePrediction], records: Sequence[Record], family_of: dict[str, str] | None = None
) -> dict[str, Any]:
    """The ESI numbers of one labelled set, and the protocol selection's where the set labels protocols, from
    serving-path predictions."""
    true = [int(r["esi"]) for r in records]
    argmax = [max(range(5), key=lambda k, p=p: p.probabilities[k]) + 1 for p in predictions]
    out = {
        "esi": esi_metrics(true, [p.esi for p in predictions]),
        "esi_argmax": esi_metrics(true, argmax),
        "calibration": calibration(true, [p.probabilities for p in predictions]),
        "uncertain_rate": sum(p.uncertain for p in predictions) / max(1, len(predictions)),
    }
    if all("decision_point" in r for r in records):
        out["decision_point"] = decision_point_agreement(
            [r["decision_point"] for r in records], [p.decision_point for p in predictions]
        )
    if family_of and all(r.get("protocol") in family_of for r in records):
        out["protocol"] = protocol_metrics([r["protocol"] for r in records], [p.protocol.protocol for p in predictions],
                                           [p.protocol.likeliest for p in predictions], family_of)
    return out


def evaluate_lengths(
    predictions: Sequence[TriagePrediction], records: Sequence[Record], labels: dict[str, int], baseline_tokens: int
) -> dict[str, Any]:
    labelled = [(labels[r["id"]], p.predicted_output_tokens) for r, p in zip(records, predictions, strict=True)
                if r["id"] in labels]
    return length_metrics([t for t, _ in labelled], [p for _, p in labelled], baseline_tokens)


def evaluate_sets(
    predictor: TriagePredictor, config: TrainingConfig, family_of: dict[str, str] | None = None,
    lengths_path: Path | None = None, baseline_tokens: int = 1,
) -> dict[str, Any]:
    """Every independently written evaluation set, through the serving path; output lengths against the same
    label source as training."""
    out = {}
    for name in EVALUATION_SETS:
        records = evaluation_set(name, config)
        if records:
            predictions = predict_records(predictor, records)
            labels, _ = length_labels(records, lengths_path)
            out[name] = {"path": str((EVALUATION_DIR / name).relative_to(REPO_ROOT)),
                         **evaluate(predictions, records, family_of),
                         "length": evaluate_lengths(predictions, records, labels, baseline_tokens)}
    return out


def evaluate_findings(name: str, catalogue: Catalogue, limit: int | None = None) -> dict[str, Any]:
    """Precision and recall of asserted findings and assertion accuracy on a findings set
    (``training.findings_evaluation``)."""
    from judgment.clinical import extract_many
    from training.findings_evaluation import load_findings_set, score_findings

    records, mapping = load_findings_set(EVALUATION_DIR / name)
    records = records[:limit] if limit else records
    read = dict(zip((r["id"] for r in records), extract_many([r["transcript"] for r in records], catalogue),
                    strict=True))
    by_text = {r["transcript"]: read[r["id"]] for r in records}
    scored = score_findings(records, lambda text: [(f.concept, f.status) for f in by_text[text].items], mapping,
                            catalogue)
    return {"path": str((EVALUATION_DIR / name).relative_to(REPO_ROOT)), **scored}


def train(
    config: TrainingConfig = FULL,
    *,
    out_dir: Path,
    corpus_path: Path = DEFAULT_CORPUS,
    written_path: Path = WRITTEN_CORPUS,
    lengths_path: Path | None = None,
    log: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Train, save the bundle in ``out_dir``, evaluate, write metrics.json, MODEL_CARD.md and reliability.png."""
    started = time.perf_counter()
    with deterministic(config.seed, config.threads):
        catalogue = load_catalogue()
        written = esi_training_records(config, written_path)
        template_test = evaluation_records(load_corpus(corpus_path), config)
        log(f"{config.name}: {len(written)} written calls for ESI, protocol and length; reading findings…")
        texts = [r["transcript"] for r in written]
        vectoriser = NgramVectoriser.fit(texts, max_n=config.max_n, min_df=config.min_df)
        names = feature_names(catalogue)
        inputs, results = call_inputs(vectoriser, catalogue, texts, names)
        esi, validation = train_esi(inputs, results, names, written, config)
        library = load_library()
        family_of = protocol_families()
        protocol, protocol_validation = train_protocol(
            inputs, [r["protocol"] for r in written], author_folds(written), library.ids, family_of, config.protocol,
        )
        labels, label_source = length_labels(written, lengths_path)
        length = train_length(inputs, written, labels, config)
        manifest = _manifest(config, label_source, vectoriser.dim, catalogue.label, library.label)
        version = write_bundle(out_dir, vectoriser=vectoriser, esi=esi, length=length, protocol=protocol,
                               manifest=manifest)
        trained_s = time.perf_counter() - started
        log(f"trained {version} in {trained_s:.1f} s; evaluating through the saved bundle…")
        predictor = read_bundle(out_dir)
        baseline = round(statistics.median(labels.values()))
        metrics = {
            "version": version,
            "catalogue": catalogue.label,
            "n_terms": vectoriser.dim,
            "config": asdict(config),
            "corpus": _corpus_facts(written_path, written, corpus_path, template_test),
            "length_label_source": label_source,
            "thresholds": list(esi.thresholds),
            "validation": validation,
            "protocol_validation": protocol_validation,
            "protocol_library": library.label,
            "evaluation": evaluate_sets(predictor, config, family_of, lengths_path, baseline),
            "findings": {name: evaluate_findings(name, predictor.catalogue, config.eval_limit) for name in FINDINGS_SETS},
            "test": evaluate(predict_records(predictor, template_test), template_test, family_of),
            "timing": {"train_s": round(trained_s, 1), "total_s": round(time.perf_counter() - started, 1)},
        }
    (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=2, sort_keys=True) + "\n")
    (out_dir / "MODEL_CARD.md").write_text(render_model_card(metrics))
    render_reliability(metrics, out_dir / "reliability.png")
    return metrics


def _manifest(config: TrainingConfig, label_source: str, n_terms: int, catalogue: str, library: str) -> dict[str, Any]:
    return {
        "features": f"word 1-{config.max_n}-grams used by >= {config.min_df} training calls, TF-IDF, unit length",
        "n_terms": n_terms,
        "config": config.name,
        "catalogue": catalogue,
        "esi": {"l2": config.esi.l2, "clinical_weight": config.esi.clinical_weight},
        "protocol": {"l2": config.protocol.l2, "clinical_weight": config.protocol.clinical_weight, "library": library},
        "length": {"l2": config.length.l2, "label_source": label_source},
    }


def _relative(path: Path) -> str:
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


def _corpus_facts(
    written_path: Path, written: list[Record], corpus_path: Path, template_test: list[Record]
) -> dict[str, Any]:
    files = sorted(written_path.glob("*.jsonl")) if written_path.is_dir() else [written_path]
    digest = hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()
    return {
        "written_path": _relative(written_path),
        "written_sha256": digest,
        "written_calls": len(written),
        "written_authors": len({r["id"].split("-")[0] for r in written}),
        "path": _relative(corpus_path),
        "sha256": file_sha256(corpus_path),
        "test_calls": len(template_test),
        "test_templates": len({r["template_id"] for r in template_test}),
    }
