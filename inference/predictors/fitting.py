"""Seeded fitting of the heads (ESI, protocol, length), out-of-fold predictions, and tuning of their decision thresholds."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .esi import N_LEVELS, EsiHead, decide_levels
from .evaluation import esi_metrics, objective, protocol_metrics
from .length import LengthHead
from .protocol import UNCLEAR, ProtocolClassifier, ProtocolHead, choose

THRESHOLD_GRID = tuple(round(0.1 + 0.05 * i, 2) for i in range(12))  # 0.10 .. 0.65


@dataclass(frozen=True)
class HeadConfig:
    hidden: int
    dropout: float
    epochs: int
    lr: float
    weight_decay: float
    batch_size: int


def _batches(n: int, batch_size: int, generator: torch.Generator):
    order = torch.randperm(n, generator=generator)
    for start in range(0, n, batch_size):
        yield order[start : start + batch_size]


def _fit(model: nn.Module, loss_fn, x: torch.Tensor, y: torch.Tensor, cfg: HeadConfig, seed: int) -> nn.Module:
    generator = torch.Generator().manual_seed(seed)
    optimiser = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimiser, T_max=cfg.epochs)
    model.train()
    for _ in range(cfg.epochs):
        for idx in _batches(len(x), cfg.batch_size, generator):
            optimiser.zero_grad()
            loss_fn(model(x[idx]), y[idx]).backward()
            optimiser.step()
        schedule.step()
    return model.eval()


def class_weights(labels: torch.Tensor) -> torch.Tensor:
    """Balanced weights (n / (k * count)) so rarer levels count as much as common ones."""
    counts = torch.bincount(labels, minlength=N_LEVELS).clamp(min=1).float()
    return counts.sum() / (N_LEVELS * counts)


@contextlib.contextmanager
def single_threaded() -> Iterator[None]:
    """The heads are small (a few hundred units): intra-op threads only add synchronisation, and on a shared
    2-core machine under load two threads made one fit ~50x slower (70 s vs 1.4 s). Single-threaded fits are
    also bitwise reproducible whatever the caller's thread setting."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def fit_esi_head(x: torch.Tensor, esi: torch.Tensor, cfg: HeadConfig, seed: int) -> EsiHead:
    """``esi`` holds levels 1-5; the head predicts logits over 5 classes."""
    torch.manual_seed(seed)
    labels = esi - 1
    model = EsiHead(x.shape[1], cfg.hidden, cfg.dropout)
    loss = nn.CrossEntropyLoss(weight=class_weights(labels), label_smoothing=0.05)
    with single_threaded():
        return _fit(model, loss, x, labels, cfg, seed)  # type: ignore[return-value]


def fit_protocol_head(x: torch.Tensor, labels: torch.Tensor, n_protocols: int, cfg: HeadConfig, seed: int) -> ProtocolHead:
    """``labels``: protocol indices. Class weights are the square root of balanced ones: rare protocols count
    more without the catch-all ("sick_person") being starved."""
    torch.manual_seed(seed)
    counts = torch.bincount(labels, minlength=n_protocols).clamp(min=1).float()
    weights = (counts.sum() / (n_protocols * counts)).sqrt()
    model = ProtocolHead(x.shape[1], cfg.hidden, cfg.dropout, n_protocols)
    loss = nn.CrossEntropyLoss(weight=weights, label_smoothing=0.05)
    with single_threaded():
        return _fit(model, loss, x, labels, cfg, seed)  # type: ignore[return-value]


PROTOCOL_THRESHOLD_GRID = tuple(round(0.05 * i, 2) for i in range(1, 19))  # 0.05 .. 0.90
WRONG_CONFIDENT_COST = 2.0  # a confident wrong protocol misleads; an unclear one asks the family's questions


def tune_protocol_threshold(probabilities: torch.Tensor, true: Sequence[str], ids: Sequence[str]) -> float:
    """The threshold minimising 2 x (wrong and confident) + unclear over the grid; ties keep the lower."""
    def cost(threshold: float) -> float:
        chosen = [choose(row, ids, threshold).protocol for row in probabilities.tolist()]
        wrong = sum(c not in (t, UNCLEAR) for c, t in zip(chosen, true, strict=True))
        unclear = sum(c == UNCLEAR for c in chosen)
        return (WRONG_CONFIDENT_COST * wrong + unclear) / max(1, len(true))

    return min(PROTOCOL_THRESHOLD_GRID, key=lambda t: (cost(t), t))


def fit_length_head(x: torch.Tensor, standardised_log_tokens: torch.Tensor, cfg: HeadConfig, seed: int) -> LengthHead:
    torch.manual_seed(seed)
    model = LengthHead(x.shape[1], cfg.hidden, cfg.dropout)
    with single_threaded():
        return _fit(model, nn.SmoothL1Loss(), x, standardised_log_tokens, cfg, seed)  # type: ignore[return-value]


def tune_thresholds(
    probabilities: torch.Tensor, true: Sequence[int], decide: Callable[[Sequence[float]], list[int]] | None = None,
    rounds: int = 3,
) -> tuple[float, ...]:
    """Coordinate ascent over the 4 cumulative thresholds, maximising ``evaluation.objective`` of the full
    decision: ``decide(thresholds)`` gives the final levels (by default the thresholds alone; training passes
    the judgement, algorithm included). Starts at 0.5 (the median level); ties keep the lower (more urgent)
    threshold.
    """
    thresholds = [0.5] * (N_LEVELS - 1)
    decide = decide or (lambda t: decide_levels(probabilities, t).tolist())

    def score(candidate: Sequence[float]) -> float:
        return objective(esi_metrics(true, decide(candidate)))

    best = score(thresholds)
    for _, k in itertools.product(range(rounds), range(N_LEVELS - 1)):
        for value in THRESHOLD_GRID:
            candidate = [*thresholds[:k], value, *thresholds[k + 1 :]]
            s = score(candidate)
            if s > best + 1e-12 or (abs(s - best) <= 1e-12 and value < thresholds[k]):
                best, thresholds = s, candidate
    return tuple(thresholds)


def out_of_fold(
    x: torch.Tensor, y: torch.Tensor, folds: Sequence[int], n_classes: int,
    fit: Callable[[torch.Tensor, torch.Tensor], torch.nn.Module],
) -> torch.Tensor:
    """Class probabilities of every row from a head fitted (by ``fit``, exactly like the shipped one) on the
    other folds."""
    oof = torch.zeros((len(y), n_classes), dtype=torch.float64)
    for k in sorted(set(folds)):
        rows = [i for i, f in enumerate(folds) if f != k]
        held = [i for i, f in enumerate(folds) if f == k]
        head = fit(x[rows], y[rows])
        with torch.inference_mode():
            oof[held] = torch.softmax(head(x[held]), dim=1).double()
    return oof


def oof_method(folds: Sequence[int]) -> str:
    return f"{len(set(folds))}-fold out-of-fold predictions of the written corpus, a fold per author"


def train_protocol(
    x: torch.Tensor, true: Sequence[str], folds: Sequence[int], ids: Sequence[str], family_of: dict[str, str],
    cfg: HeadConfig, seed: int,
) -> tuple[ProtocolClassifier, dict[str, Any]]:
    """As the ESI head: out-of-fold predictions (``folds``: one per author) tune the confidence threshold, then
    the shipped head is fitted on all of it. ``x``: the ESI head's inputs; ``true``: the labelled protocols."""
    index = {p: i for i, p in enumerate(ids)}
    y = torch.tensor([index[p] for p in true])
    oof = out_of_fold(x, y, folds, len(ids), lambda xs, ys: fit_protocol_head(xs, ys, len(ids), cfg, seed))
    threshold = tune_protocol_threshold(oof, true, ids)
    choices = [choose(row, ids, threshold) for row in oof.tolist()]
    validation = {
        "method": oof_method(folds),
        "threshold": threshold,
        **protocol_metrics(true, [c.protocol for c in choices], [c.likeliest for c in choices], family_of),
    }
    head = fit_protocol_head(x, y, len(ids), cfg, seed)
    return ProtocolClassifier(head, tuple(ids), threshold), validation
