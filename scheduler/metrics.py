"""Metrics as docs/architecture.md §4 defines them, per ESI level and overall.

- waiting time = completion - arrival (sojourn, the request's own service included); normalized waiting
  time = waiting time per generated token; TTFT = first token - arrival; E2E = completion - arrival.
- SLO attainment: share of requests meeting both their tier's mean TTFT and mean E2E targets (``meets_slo``,
  ``slo_attainment``: the simulator, the load test and the dispatcher board all count it with these); per
  measure, the share within the tier's mean target (``share_within``: TTFT, TPOT = seconds per token after the
  first, E2E; the SLO monitor of ``scheduler.slo`` counts it the same way).
- TDG ratio (PROSERVE): sum of weights of tokens delivered by their deadline over the sum of all weights;
  token i of a request is due at arrival + TTFT target + (i - 1) * TPOT target, weighs the tier's
  ``tdg_weight`` times ``FIRST_TOKEN_WEIGHT`` for the first token, times 1 after.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from scheduler.config import ESI_LEVELS, TierPolicy

FIRST_TOKEN_WEIGHT = 4.0
LEVEL_KEYS = tuple(str(level) for level in ESI_LEVELS)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The linearly interpolated ``q``-th percentile (0..100) of ``values``; None for none. The one definition
    the simulator, the load test and the board use. O(n log n)."""
    return float(np.percentile(values, q)) if len(values) else None


@dataclass(frozen=True)
class RequestOutcome:
    esi: int  # true level
    arrival_s: float
    first_token_s: float
    finish_s: float
    output_tokens: int
    preemptions: int
    ttft_target_s: float
    e2e_target_s: float
    tpot_target_s: float = 0.0  # 0: TPOT attainment not counted


def share_within(values: Sequence[float], bound: float) -> float | None:
    """The share of ``values`` at most ``bound``; None for none."""
    return sum(v <= bound for v in values) / len(values) if len(values) else None


def slo_targets(tier: TierPolicy) -> tuple[float, float]:
    """The (TTFT, E2E) seconds a request of ``tier`` must each stay within to meet its SLO."""
    return tier.ttft_target_mean_s, tier.e2e_target_mean_s


def meets_slo(*, ttft_s: float | None, e2e_s: float, ttft_target_s: float, e2e_target_s: float) -> bool:
    """Whether a finished request met its SLO; one that never produced a token (``ttft_s`` None) did not."""
    return ttft_s is not None and ttft_s <= ttft_target_s and e2e_s <= e2e_target_s


def slo_attainment(met: Sequence[bool]) -> float | None:
    """The share of requests that met their SLO; None for no requests."""
    return sum(met) / len(met) if met else None


def _round(x: float) -> float:
    return round(float(x), 6)


def summarise(outcomes: Sequence[RequestOutcome]) -> dict[str, float]:
    """count, waiting mean/p50/p90/p99, normalized waiting mean, TTFT, E2E, SLO attainment; O(n log n)."""
    if not outcomes:
        return {"count": 0}
    wait = np.array([o.finish_s - o.arrival_s for o in outcomes])
    ttft = np.array([o.first_token_s - o.arrival_s for o in outcomes])
    tokens = np.array([max(1, o.output_tokens) for o in outcomes])
    tpot = np.array([(o.finish_s - o.first_token_s) / (o.output_tokens - 1) for o in outcomes if o.output_tokens > 1])
    tpot_met = [(o.finish_s - o.first_token_s) / (o.output_tokens - 1) <= o.tpot_target_s
                for o in outcomes if o.output_tokens > 1 and o.tpot_target_s > 0]
    met = [
        meets_slo(ttft_s=o.first_token_s - o.arrival_s, e2e_s=o.finish_s - o.arrival_s,
                  ttft_target_s=o.ttft_target_s, e2e_target_s=o.e2e_target_s)
        for o in outcomes
    ]
    p = percentile
    return {
        "count": len(outcomes),
        "wait_mean": _round(wait.mean()),
        "wait_p50": _round(p(wait, 50)),
        "wait_p90": _round(p(wait, 90)),
        "wait_p99": _round(p(wait, 99)),
        "normalized_wait_mean": _round((wait / tokens).mean()),
        "ttft_mean": _round(ttft.mean()),
        "ttft_p50": _round(p(ttft, 50)),
        "ttft_p99": _round(p(ttft, 99)),
        "tpot_mean": _round(tpot.mean()) if len(tpot) else 0.0,
        "e2e_mean": _round(wait.mean()),
        "e2e_p99": _round(p(wait, 99)),
        "slo_attainment": _round(slo_attainment(met)),
        "ttft_attainment": _round(np.mean([t <= o.ttft_target_s for t, o in zip(ttft, outcomes, strict=True)])),
        **({"tpot_attainment": _round(np.mean(tpot_met))} if tpot_met else {}),
        "preemptions_mean": _round(np.mean([o.preemptions for o in outcomes])),
    }


def by_esi(outcomes: Iterable[RequestOutcome]) -> dict[str, dict[str, float]]:
    groups: dict[str, list[RequestOutcome]] = {k: [] for k in LEVEL_KEYS}
    for o in outcomes:
        groups[str(o.esi)].append(o)
    return {k: summarise(v) for k, v in groups.items()}


class TdgAccumulator:
    """Adds up token weights as tokens are delivered; O(1) per token."""

    def __init__(self) -> None:
        self.on_time = 0.0
        self.total = 0.0

    def token(self, *, index: int, t_s: float, arrival_s: float, ttft_target_s: float, tpot_target_s: float,
              weight: float) -> None:
        w = weight * (FIRST_TOKEN_WEIGHT if index == 1 else 1.0)
        self.total += w
        if t_s <= arrival_s + ttft_target_s + (index - 1) * tpot_target_s:
            self.on_time += w

    @property
    def ratio(self) -> float:
        return self.on_time / self.total if self.total else 1.0


def count_token(tdg: TdgAccumulator, tier: TierPolicy, *, index: int, t_s: float, arrival_s: float) -> None:
    """Token ``index`` (1-based) of a request of ``tier`` that arrived at ``arrival_s``, delivered at ``t_s``: due
    by the tier's mean TTFT target and TPOT target, weighing its ``tdg_weight``. The one per-token rule of the
    simulators and the live worker (``worker.metrics``). O(1)."""
    tdg.token(index=index, t_s=t_s, arrival_s=arrival_s, ttft_target_s=tier.ttft_target_mean_s,
              tpot_target_s=tier.tpot_target_s, weight=tier.tdg_weight)
