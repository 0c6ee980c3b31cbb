"""Fitting of the heads (ESI, protocol, length), out-of-fold predictions, and tuning of their decision thresholds."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from judgment.predictors.esi import N_LEVELS, decide_levels
from judgment.predictors.linear import LinearHead, fit_ridge, fit_softmax
from judgment.predictors.ngrams import CallInputs
from judgment.predictors.protocol import UNCLEAR, ProtocolClassifier, choose
from training.predictors.evaluation import esi_metrics, objective, protocol_metrics

THRESHOLD_GRID = tuple(round(0.1 + 0.05 * i, 2) for i in range(12))  # 0.10 .. 0.65


@dataclass(frozen=True)
class HeadConfig:
    l2: float  # x ||W||^2 added to the loss
    clinical_weight: float = 0.0  # the clinical features' value beside the unit-length n-gram vector; 0: n-grams only
    class_weight_power: float = 1.0  # 1: balanced class weights; 0.5: their square root


def fit_esi_head(inputs: CallInputs, esi: torch.Tensor, cfg: HeadConfig) -> LinearHead:
    """``esi`` holds levels 1-5; the head scores 5 classes, each level weighted alike."""
    return fit_softmax(inputs.matrix(cfg.clinical_weight), esi - 1, N_LEVELS, l2=cfg.l2,
                       class_weight_power=cfg.class_weight_power)


def fit_protocol_head(inputs: CallInputs, labels: torch.Tensor, n_protocols: int, cfg: HeadConfig) -> LinearHead:
    """``labels``: protocol indices. ``class_weight_power`` 1 weighs every protocol alike (rare ones as much as
    the catch-all "sick_person"); 0.5, by the square root of its rarity."""
    return fit_softmax(inputs.matrix(cfg.clinical_weight), labels, n_protocols, l2=cfg.l2,
                       class_weight_power=cfg.class_weight_power)


def fit_length_head(inputs: CallInputs, standardised_log_tokens: torch.Tensor, cfg: HeadConfig) -> LinearHead:
    return fit_ridge(inputs.matrix(0.0), standardised_log_tokens, l2=cfg.l2)


PROTOCOL_THRESHOLD_GRID = tuple(round(0.05 * i, 2) for i in range(1, 19))  # 0.05 .. 0.90
PROTOCOL_MARGIN_GRID = tuple(round(0.025 * i, 3) for i in range(13))  # 0 .. 0.30
WRONG_CONFIDENT_COST = 4.0  # a confident wrong protocol reads out the wrong instructions; an unclear one asks the family's questions


def tune_protocol_decision(probabilities: torch.Tensor, true: Sequence[str], ids: Sequence[str]
                           ) -> tuple[float, float]:
    """The (threshold, margin) minimising WRONG_CONFIDENT_COST x (wrong and confident) + unclear over the grids;
    ties keep the lower of each. O(|grids| x n x p log p) for n calls and p protocols."""
    rows = probabilities.tolist()

    def cost(candidate: tuple[float, float]) -> float:
        chosen = [choose(row, ids, *candidate).protocol for row in rows]
        wrong = sum(c not in (t, UNCLEAR) for c, t in zip(chosen, true, strict=True))
        unclear = sum(c == UNCLEAR for c in chosen)
        return (WRONG_CONFIDENT_COST * wrong + unclear) / max(1, len(true))

    grid = [(t, m) for t in PROTOCOL_THRESHOLD_GRID for m in PROTOCOL_MARGIN_GRID]
    return min(grid, key=lambda candidate: (round(cost(candidate), 12), candidate))


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
    inputs: CallInputs, y: torch.Tensor, folds: Sequence[int], n_classes: int,
    fit: Callable[[CallInputs, torch.Tensor], LinearHead], clinical_weight: float,
) -> torch.Tensor:
    """Class probabilities of every call from a head fitted (by ``fit``, exactly like the shipped one) on the
    other folds."""
    oof = torch.zeros((len(y), n_classes), dtype=torch.float64)
    for k in sorted(set(folds)):
        rows = [i for i, f in enumerate(folds) if f != k]
        held = [i for i, f in enumerate(folds) if f == k]
        head = fit(inputs.subset(rows), y[rows])
        oof[held] = head.probabilities(inputs.subset(held).matrix(clinical_weight))
    return oof


def oof_method(folds: Sequence[int]) -> str:
    return f"{len(set(folds))}-fold out-of-fold predictions of the written corpus, folds by author"


def train_protocol(
    inputs: CallInputs, true: Sequence[str], folds: Sequence[int], ids: Sequence[str], family_of: dict[str, str],
    cfg: HeadConfig,
) -> tuple[ProtocolClassifier, dict[str, Any]]:
    """As the ESI head: out-of-fold predictions (``folds``: one per author) tune the confidence threshold and
    margin, then
    the shipped head is fitted on all of it. ``true``: the labelled protocols."""
    index = {p: i for i, p in enumerate(ids)}
    y = torch.tensor([index[p] for p in true])
    oof = out_of_fold(inputs, y, folds, len(ids), lambda xs, ys: fit_protocol_head(xs, ys, len(ids), cfg),
                      cfg.clinical_weight)
    threshold, margin = tune_protocol_decision(oof, true, ids)
    choices = [choose(row, ids, threshold, margin) for row in oof.tolist()]
    validation = {
        "method": oof_method(folds),
        "threshold": threshold,
        "margin": margin,
        "wrong_confident_cost": WRONG_CONFIDENT_COST,
        **protocol_metrics(true, [c.protocol for c in choices], [c.likeliest for c in choices], family_of),
    }
    head = fit_protocol_head(inputs, y, len(ids), cfg)
    return ProtocolClassifier(head, tuple(ids), threshold, cfg.clinical_weight, margin), validation
