"""Metrics for the model card, computed from predictions (pure functions of lists of numbers)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from scheduler.config import ESI_LEVELS


def _ratio(numerator: int, denominator: int) -> float:
    return numerator / denominator if denominator else 0.0


def confusion_matrix(true: Sequence[int], pred: Sequence[int]) -> list[list[int]]:
    """Rows: true ESI 1-5; columns: predicted ESI 1-5."""
    matrix = [[0] * len(ESI_LEVELS) for _ in ESI_LEVELS]
    for t, p in zip(true, pred, strict=True):
        matrix[t - 1][p - 1] += 1
    return matrix


def esi_metrics(true: Sequence[int], pred: Sequence[int]) -> dict[str, Any]:
    matrix = confusion_matrix(true, pred)
    per_level = {}
    for k in ESI_LEVELS:
        support = sum(matrix[k - 1])
        predicted = sum(row[k - 1] for row in matrix)
        hits = matrix[k - 1][k - 1]
        per_level[str(k)] = {
            "precision": _ratio(hits, predicted),
            "recall": _ratio(hits, support),
            "support": support,
            "predicted": predicted,
        }
    recalls = [m["recall"] for m in per_level.values() if m["support"]]
    high_acuity = [(t, p) for t, p in zip(true, pred, strict=True) if t <= 2]
    n = len(true)
    return {
        "n": n,
        "accuracy": _ratio(sum(t == p for t, p in zip(true, pred, strict=True)), n),
        "macro_recall": sum(recalls) / len(recalls) if recalls else 0.0,
        # docs/architecture.md §4: share of true ESI 1-2 calls classified ESI 3-5
        "under_triage_rate": _ratio(sum(p >= 3 for _, p in high_acuity), len(high_acuity)),
        "under_triage_any_level_rate": _ratio(sum(p > t for t, p in zip(true, pred, strict=True)), n),
        "over_triage_rate": _ratio(sum(p < t for t, p in zip(true, pred, strict=True)), n),
        "per_level": per_level,
        "confusion_matrix": matrix,
    }


def length_metrics(true_tokens: Sequence[int], pred_tokens: Sequence[int], baseline_tokens: int) -> dict[str, Any]:
    """MAE in tokens, plus the MAE of always predicting ``baseline_tokens`` (the train median)."""
    errors = [abs(t - p) for t, p in zip(true_tokens, pred_tokens, strict=True)]
    log_errors = [abs(math.log(t) - math.log(p)) for t, p in zip(true_tokens, pred_tokens, strict=True)]
    return {
        "n": len(errors),
        "mae_tokens": statistics.fmean(errors) if errors else 0.0,
        "median_abs_error_tokens": statistics.median(errors) if errors else 0.0,
        "mean_abs_log_error": statistics.fmean(log_errors) if log_errors else 0.0,
        "baseline_tokens": baseline_tokens,
        "baseline_mae_tokens": statistics.fmean(abs(t - baseline_tokens) for t in true_tokens) if errors else 0.0,
    }


def calibration(true: Sequence[int], probabilities: Sequence[Sequence[float]], bins: int = 10) -> dict[str, Any]:
    """Top-label reliability: per confidence bin (the head's highest probability), how often that level is
    right; and the expected calibration error (the support-weighted gap)."""
    rows = [[0, 0.0, 0] for _ in range(bins)]  # count, sum of confidence, hits
    for t, p in zip(true, probabilities, strict=True):
        level = max(range(5), key=lambda k: p[k])
        confidence = float(p[level])
        b = min(bins - 1, int(confidence * bins))
        rows[b][0] += 1
        rows[b][1] += confidence
        rows[b][2] += int(level + 1 == t)
    n = sum(r[0] for r in rows)
    table = [
        {"bin": f"{b / bins:.1f}-{(b + 1) / bins:.1f}", "n": c, "confidence": s / c if c else 0.0,
         "accuracy": h / c if c else 0.0}
        for b, (c, s, h) in enumerate(rows)
    ]
    ece = sum(abs(r["accuracy"] - r["confidence"]) * r["n"] for r in table) / n if n else 0.0
    return {"bins": table, "ece": ece}


def decision_point_agreement(true: Sequence[str], pred: Sequence[str]) -> dict[str, Any]:
    """Share of calls whose deciding decision point is the labelled one, overall and per labelled point."""
    per_point = {}
    for point in ("A", "B", "C", "D"):
        pairs = [(t, p) for t, p in zip(true, pred, strict=True) if t == point]
        per_point[point] = {"n": len(pairs), "agreement": _ratio(sum(t == p for t, p in pairs), len(pairs))}
    return {"agreement": _ratio(sum(t == p for t, p in zip(true, pred, strict=True)), len(true)), "per_point": per_point}


# The done-criteria of the ESI work, and what threshold tuning maximises: exact level, once under-triage of
# ESI 1-2 is within its budget (each point above costs six points of accuracy) and over-triage within its own.
UNDER_TRIAGE_BUDGET = 0.04
OVER_TRIAGE_BUDGET = 0.15


def objective(metrics: dict[str, Any]) -> float:
    under = max(0.0, metrics["under_triage_rate"] - UNDER_TRIAGE_BUDGET)
    over = max(0.0, metrics["over_triage_rate"] - OVER_TRIAGE_BUDGET)
    return metrics["accuracy"] - 6.0 * under - 1.0 * over - 0.1 * metrics["under_triage_any_level_rate"]


def protocol_metrics(
    true: Sequence[str], chosen: Sequence[str], likeliest: Sequence[str], family_of: dict[str, str]
) -> dict[str, Any]:
    """Protocol selection: right (the chosen protocol is the label), unclear, wrong and confident, the likeliest
    protocol's accuracy, and a confusion table by family (rows: the label's family; columns: the chosen
    protocol's family, or "unclear")."""
    n = len(true)
    right = sum(c == t for c, t in zip(chosen, true, strict=True))
    unclear = sum(c == "unclear" for c in chosen)
    families = sorted(set(family_of.values()))
    table = {f: dict.fromkeys([*families, "unclear"], 0) for f in families}
    for t, c in zip(true, chosen, strict=True):
        table[family_of[t]][family_of.get(c, "unclear")] += 1
    return {
        "n": n,
        "right": _ratio(right, n),
        "unclear": _ratio(unclear, n),
        "wrong_confident": _ratio(n - right - unclear, n),
        "likeliest_right": _ratio(sum(a == t for a, t in zip(likeliest, true, strict=True)), n),
        "by_family": table,
    }
