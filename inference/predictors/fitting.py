"""Seeded fitting of the two heads and tuning of the ESI decision thresholds."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from .esi import N_LEVELS, EsiHead, NgramHead, cap_danger_zone, decide_levels
from .evaluation import esi_metrics, objective
from .length import LengthHead
from .ngrams import fit_idf, tfidf

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


def fit_ngram_head(transcripts: Sequence[str], esi: torch.Tensor, c: float, seed: int, buckets: int) -> NgramHead:
    """Fit the idf on ``transcripts`` (TRAIN, or a fold's TRAIN part), then the linear head to convergence:
    full-batch L-BFGS on the class-balanced cross-entropy plus an L2 penalty of strength 1 / (2 c n) (the
    objective of an L2 logistic regression with inverse regularisation ``c``). Deterministic: no sampling."""
    torch.manual_seed(seed)
    labels = esi - 1
    model = NgramHead(buckets)
    nn.init.zeros_(model.linear.weight), nn.init.zeros_(model.linear.bias)
    model.idf.copy_(fit_idf(transcripts, buckets))
    x = tfidf(transcripts, model.idf)
    loss_fn = nn.CrossEntropyLoss(weight=class_weights(labels))
    penalty = 1.0 / (2 * c * len(labels))
    optimiser = torch.optim.LBFGS(model.linear.parameters(), lr=1, max_iter=300, history_size=20,
                                  tolerance_grad=1e-6, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        optimiser.zero_grad()
        loss = loss_fn(model(x), labels) + penalty * model.linear.weight.pow(2).sum()
        loss.backward()
        return loss

    with single_threaded():
        optimiser.step(closure)
    return model.eval()


def fit_length_head(x: torch.Tensor, standardised_log_tokens: torch.Tensor, cfg: HeadConfig, seed: int) -> LengthHead:
    torch.manual_seed(seed)
    model = LengthHead(x.shape[1], cfg.hidden, cfg.dropout)
    with single_threaded():
        return _fit(model, nn.SmoothL1Loss(), x, standardised_log_tokens, cfg, seed)  # type: ignore[return-value]


def tune_thresholds(
    probabilities: torch.Tensor, true: Sequence[int], danger: Sequence[bool], rounds: int = 3
) -> tuple[float, ...]:
    """Coordinate ascent over the 4 cumulative thresholds, maximising ``evaluation.objective`` of the
    full decision (thresholds, then the danger-zone rule with each call's ``danger`` flag, computed once
    by the caller: parsing the vitals costs far more than a score). Starts at 0.5 (the median level); ties
    keep the lower (more urgent) threshold.
    """
    thresholds = [0.5] * (N_LEVELS - 1)

    def score(candidate: Sequence[float]) -> float:
        levels = cap_danger_zone(decide_levels(probabilities, candidate).tolist(), danger)
        return objective(esi_metrics(true, levels))

    best = score(thresholds)
    for _, k in itertools.product(range(rounds), range(N_LEVELS - 1)):
        for value in THRESHOLD_GRID:
            candidate = [*thresholds[:k], value, *thresholds[k + 1 :]]
            s = score(candidate)
            if s > best + 1e-12 or (abs(s - best) <= 1e-12 and value < thresholds[k]):
                best, thresholds = s, candidate
    return tuple(thresholds)
