"""Workloads for the simulator, and the predictor models: the paper's (50-token length buckets, urgency errors
of a fixed distance in a random direction) and our classifier's own urgency errors, as measured on an evaluation
set (``UrgencyErrorModel``).

All randomness comes from the ``random.Random`` passed in: the same seed gives the same workload.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

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
    alternative: int | None = None  # the other level an uncertain verdict named (scheduler.config.scheduling_level)


@dataclass(frozen=True)
class Verdict:
    """What the classifier said of one labelled call: its level and, when uncertain, the other level."""

    level: int
    alternative: int | None = None


@dataclass(frozen=True)
class UrgencyErrorModel:
    """The urgency classifier's verdicts on an evaluation set, per true level: drawing one at random reproduces
    its confusion and its uncertainty together (which calls it doubts, and towards which level).

    ``draw(rng, level, error_rate=r)`` keeps the shape and sets the error rate: with probability r one of the
    wrong verdicts for that level (else a right one), each drawn in proportion to how often it was given. A
    level the set never got wrong (a good classifier misses no ESI-1 call in a few hundred) borrows the other
    levels' wrong verdicts, moved to it: the same distance and direction, the alternative moved alike, those
    that stay on the scale; with none, the paper's error (one level away, no alternative named).
    Written by ``python manage.py evaluate_triage --urgency-errors FILE``."""

    source: str
    verdicts: Mapping[int, Sequence[Verdict]]  # true level -> one verdict per call, in the set's order

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> UrgencyErrorModel:
        verdicts: dict[int, list[Verdict]] = {level: [] for level in ESI_LEVELS}
        for row in data["verdicts"]:
            alternative = row.get("alternative")
            verdict = Verdict(int(row["level"]), None if alternative is None else int(alternative))
            verdicts[int(row["true"])].extend([verdict] * int(row["calls"]))
        return cls(str(data.get("source", "")), verdicts)

    @classmethod
    def read(cls, path: str) -> UrgencyErrorModel:
        with open(path, encoding="utf-8") as f:
            return cls.from_json(json.load(f))

    def error_rate(self) -> float:
        """The share of wrong verdicts over the whole set."""
        calls = [(level, v) for level, vs in self.verdicts.items() for v in vs]
        return sum(v.level != level for level, v in calls) / max(1, len(calls))

    def draw(self, rng: random.Random, level: int, *, error_rate: float | None = None) -> Verdict:
        given = self.verdicts.get(level) or [Verdict(level)]
        if error_rate is None:
            return rng.choice(given)
        wrong, right = self._wrong_and_right[level]
        if rng.random() < error_rate:
            return rng.choice(wrong) if wrong else Verdict(_one_level_off(rng, level, 1))
        return rng.choice(right) if right else Verdict(level)

    @cached_property
    def _wrong_and_right(self) -> dict[int, tuple[list[Verdict], list[Verdict]]]:
        """Per level, once: its wrong verdicts (or the others' moved to it) and its right ones."""
        out = {}
        for level in ESI_LEVELS:
            given = self.verdicts.get(level) or [Verdict(level)]
            wrong = [v for v in given if v.level != level] or self._moved_to(level)
            out[level] = (wrong, [v for v in given if v.level == level])
        return out

    def _moved_to(self, level: int) -> list[Verdict]:
        """Every other level's wrong verdicts, moved by the difference between the levels; those off the scale
        are left out (an ESI-1 call can only be under-triaged). O(calls)."""
        moved = []
        for true, verdicts in self.verdicts.items():
            for v in verdicts:
                if v.level == true:
                    continue
                shifted = v.level + level - true
                alternative = None if v.alternative is None else v.alternative + level - true
                if shifted in ESI_LEVELS and (alternative is None or alternative in ESI_LEVELS):
                    moved.append(Verdict(shifted, alternative))
        return moved


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


# Mass-casualty mixes, an assumption to vary, not a measurement: the background is an ordinary day's calls (most
# ESI 3-4, few ESI 1), the burst an incident's casualties (far more ESI 1-2, the walking wounded at 4-5).
BACKGROUND_ESI_MIX = {1: 0.02, 2: 0.15, 3: 0.40, 4: 0.30, 5: 0.13}
# A dispatch centre's day: mostly low acuity, few ESI-1 (issue 31's slot-bound workload).
DISPATCH_CENTRE_ESI_MIX = {1: 0.03, 2: 0.17, 3: 0.40, 4: 0.28, 5: 0.12}
CASUALTY_ESI_MIX = {1: 0.15, 2: 0.30, 3: 0.25, 4: 0.20, 5: 0.10}


def _level(rng: random.Random, mix: Mapping[int, float]) -> int:
    return rng.choices(list(mix), weights=list(mix.values()))[0]


def dispatch_workload(rng: random.Random, *, rate_per_s: float, requests: int) -> list[Arrival]:
    """A dispatch centre's day: Poisson arrivals at ``rate_per_s`` of ``DISPATCH_CENTRE_ESI_MIX`` levels;
    lengths as the paper's."""
    t = 0.0
    arrivals = []
    for _ in range(requests):
        t += rng.expovariate(rate_per_s)
        arrivals.append(Arrival(t, _level(rng, DISPATCH_CENTRE_ESI_MIX), rng.randint(1, 499), rng.randint(1, 499)))
    return arrivals


def mass_casualty_workload(
    rng: random.Random, *, background_rate_per_s: float, duration_s: float, burst_size: int, burst_at_s: float,
    burst_spread_s: float = 10.0,
) -> list[Arrival]:
    """A Poisson background over ``duration_s`` (``BACKGROUND_ESI_MIX``) and a burst of ``burst_size`` calls
    spread uniformly over ``burst_spread_s`` from ``burst_at_s`` (``CASUALTY_ESI_MIX``); lengths as the paper's."""
    arrivals = []
    t = rng.expovariate(background_rate_per_s) if background_rate_per_s > 0 else duration_s
    while t < duration_s:
        arrivals.append(Arrival(t, _level(rng, BACKGROUND_ESI_MIX), rng.randint(1, 499), rng.randint(1, 499)))
        t += rng.expovariate(background_rate_per_s)
    for _ in range(burst_size):
        at = burst_at_s + rng.uniform(0.0, burst_spread_s)
        arrivals.append(Arrival(at, _level(rng, CASUALTY_ESI_MIX), rng.randint(1, 499), rng.randint(1, 499)))
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


def _one_level_off(rng: random.Random, level: int, distance: int) -> int:
    """The paper's urgency error: ``distance`` levels away in a random direction, never outside 1-5 (the other
    direction is taken, or the nearest valid level)."""
    sign = rng.choice((-1, 1))
    wrong = level + sign * distance
    if wrong not in ESI_LEVELS:
        wrong = level - sign * distance
    return clamp_level(wrong)


def predict(
    rng: random.Random, arrivals: list[Arrival], *, exact_lengths: bool = False, urgency_error_rate: float = 0.0,
    urgency_error_distance: int = 1, length_error_rate: float = 0.0, length_error_distance: int = 2,
    urgency_errors: UrgencyErrorModel | None = None,
) -> list[Prediction]:
    """Predicted level and length for every arrival. Urgency: with ``urgency_errors``, a verdict drawn from our
    classifier's measured ones (at ``urgency_error_rate`` when that is > 0, else at the measured rate); without,
    the paper's error model: a fraction ``rate`` of requests is mispredicted by ``distance`` levels in a random
    direction. Lengths: the paper's bucketed predictor, a fraction mispredicted by ``distance`` buckets."""
    out = []
    for a in arrivals:
        level, alternative = a.esi, None
        if urgency_errors is not None:
            verdict = urgency_errors.draw(rng, a.esi, error_rate=urgency_error_rate or None)
            level, alternative = verdict.level, verdict.alternative
        elif urgency_error_rate and rng.random() < urgency_error_rate:
            level = _one_level_off(rng, a.esi, urgency_error_distance)
        length = a.output_tokens if exact_lengths else bucketed_length(rng, a.output_tokens)
        if length_error_rate and rng.random() < length_error_rate:
            length = max(1, length + rng.choice((-1, 1)) * length_error_distance * LENGTH_BUCKET_TOKENS)
        out.append(Prediction(level, length, alternative))
    return out
