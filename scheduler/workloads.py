"""Workloads for the simulator, and the paper's predictor model (50-token length buckets, error injection).

All randomness comes from the ``random.Random`` passed in: the same seed gives the same workload.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterable
from dataclasses import dataclass

from scheduler.config import ESI_LEVELS, clamp_level

LENGTH_BUCKET_TOKENS = 50


@dataclass(frozen=True)
class Arrival:
    t_s: float
    esi: int  # the true ESI level
    prompt_tokens: int
    output_tokens: int  # the true output length


@dataclass(frozen=True)
class Prediction:
    level: int  # what the urgency classifier says
    output_tokens: int  # what the length predictor says


def paper_workload(
    rng: random.Random, *, gap_s: float, concurrency: int, slots: int = 20, max_prompt_tokens: int = 499,
    max_output_tokens: int = 499,
) -> list[Arrival]:
    """Hua et al. Appendix B: ``slots`` arrival times ``gap_s`` apart, each with uniform 0..concurrency
    requests; ESI uniform 1-5; prompt and output lengths uniform 1..499."""
    arrivals = []
    for slot in range(slots):
        for _ in range(rng.randint(0, concurrency)):
            arrivals.append(Arrival(
                slot * gap_s, rng.randint(1, 5), rng.randint(1, max_prompt_tokens), rng.randint(1, max_output_tokens),
            ))
    return arrivals


def poisson_workload(
    rng: random.Random, *, rate_per_s: float, requests: int, max_prompt_tokens: int = 499,
    max_output_tokens: int = 499,
) -> list[Arrival]:
    """Exponential inter-arrival times at ``rate_per_s``; levels and lengths as in the paper workload."""
    t = 0.0
    arrivals = []
    for _ in range(requests):
        t += rng.expovariate(rate_per_s)
        arrivals.append(Arrival(t, rng.randint(1, 5), rng.randint(1, max_prompt_tokens), rng.randint(1, max_output_tokens)))
    return arrivals


def burst_workload(
    rng: random.Random, *, bursts: int, burst_size: int, gap_s: float, background_rate_per_s: float = 0.0,
) -> list[Arrival]:
    """``bursts`` bursts of exactly ``burst_size`` simultaneous calls (a mass-casualty incident), ``gap_s``
    apart, over an optional Poisson background."""
    arrivals = []
    for k in range(bursts):
        for _ in range(burst_size):
            arrivals.append(Arrival(k * gap_s, rng.randint(1, 5), rng.randint(1, 499), rng.randint(1, 499)))
    if background_rate_per_s > 0:
        horizon = bursts * gap_s
        t = rng.expovariate(background_rate_per_s)
        while t < horizon:
            arrivals.append(Arrival(t, rng.randint(1, 5), rng.randint(1, 499), rng.randint(1, 499)))
            t += rng.expovariate(background_rate_per_s)
    arrivals.sort(key=lambda a: a.t_s)
    return arrivals


def trace_workload(lines: Iterable[str]) -> list[Arrival]:
    """Replay JSONL lines ``{"t", "esi", "prompt_tokens", "output_tokens"}`` (blank lines skipped)."""
    arrivals = []
    for line in lines:
        if line.strip():
            row = json.loads(line)
            arrivals.append(Arrival(float(row["t"]), int(row["esi"]), int(row["prompt_tokens"]), int(row["output_tokens"])))
    arrivals.sort(key=lambda a: a.t_s)
    return arrivals


def bucketed_length(rng: random.Random, true_tokens: int, bucket: int = LENGTH_BUCKET_TOKENS) -> int:
    """The paper's length predictor: the true length's 50-token bucket, its lower or upper edge at random."""
    lower = (true_tokens // bucket) * bucket
    upper = math.ceil(true_tokens / bucket) * bucket
    return max(1, rng.choice((lower, upper)))


def predict(
    rng: random.Random, arrivals: list[Arrival], *, exact_lengths: bool = False, urgency_error_rate: float = 0.0,
    urgency_error_distance: int = 1, length_error_rate: float = 0.0, length_error_distance: int = 2,
) -> list[Prediction]:
    """Predicted level and length for every arrival, with the paper's error model: a fraction ``rate`` of
    requests is mispredicted by ``distance`` (levels, or length buckets) in a random direction. A level is
    never moved outside 1-5 (the other direction is taken, or the nearest valid level)."""
    out = []
    for a in arrivals:
        level = a.esi
        if urgency_error_rate and rng.random() < urgency_error_rate:
            sign = rng.choice((-1, 1))
            level = a.esi + sign * urgency_error_distance
            if level not in ESI_LEVELS:
                level = a.esi - sign * urgency_error_distance
            level = clamp_level(level)
        length = a.output_tokens if exact_lengths else bucketed_length(rng, a.output_tokens)
        if length_error_rate and rng.random() < length_error_rate:
            length = max(1, length + rng.choice((-1, 1)) * length_error_distance * LENGTH_BUCKET_TOKENS)
        out.append(Prediction(level, length))
    return out
