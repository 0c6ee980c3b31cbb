"""Scheduling overhead: microseconds per decision and per arrival with n requests waiting (batch 64).

    python -m scheduler.bench [--json] [--sizes 100,1000,10000,100000] [--iterations 2000]

Per size: n waiting requests (levels and lengths as in the paper workload, memory never binding) behind a
full running batch; then ``--iterations`` engine iterations in which finished requests leave and as many new
arrivals come, so the queue stays at n. ``decision_us`` is the median time of ``schedule()`` (what the engine
waits for between iterations); ``iteration_us`` adds ``complete_iteration``; ``arrival_us`` is ``submit``
plus the heap insertion done at the next decision, per request. Wall-clock timing is the point of this
module; nothing else in the package reads the clock.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Sequence

from scheduler.config import SchedulerConfig
from scheduler.cost import PRESETS
from scheduler.policies import make_scheduler
from scheduler.request import Request
from scheduler.workloads import bucketed_length


def _request(rng: random.Random, i: int, t_s: float) -> Request:
    output = rng.randint(1, 499)
    return Request(
        id=str(i), level=rng.randint(1, 5), arrival_s=t_s, prompt_tokens=rng.randint(1, 499),
        predicted_output_tokens=bucketed_length(rng, output), true_output_tokens=output,
    )


def bench_size(waiting: int, *, batch: int = 64, iterations: int = 2000, policy: str = "semantic",
               seed: int = 0) -> dict[str, float]:
    rng = random.Random(seed)
    cost = PRESETS["a100-4b"]
    config = SchedulerConfig(policy=policy, batch_size=batch, kv_capacity_blocks=1 << 30)
    scheduler = make_scheduler(config, cost)
    ids = iter(range(10**9))
    for _ in range(waiting + batch):
        scheduler.submit(_request(rng, next(ids), 0.0))
    now = 0.0
    scheduler.schedule(now)  # drains the initial backlog (not timed)

    # arrivals: submit + insertion into a heap already holding `waiting` requests
    probe = min(waiting, 5000)
    arrivals = [_request(rng, next(ids), now) for _ in range(probe)]
    t0 = time.perf_counter()
    for r in arrivals:
        scheduler.submit(r)
    scheduler._drain_arrivals(now)
    arrival_us = (time.perf_counter() - t0) / probe * 1e6
    for r in arrivals:  # back to `waiting` requests queued
        scheduler.cancel(r.id)

    decision_times, iteration_times = [], []
    for _ in range(iterations):
        now += 0.025
        t0 = time.perf_counter()
        decision = scheduler.schedule(now)
        t1 = time.perf_counter()
        finished = [r.id for r in decision.batch if r.generated_tokens + 1 >= r.true_output_tokens]
        scheduler.complete_iteration(now, decision, finished)
        t2 = time.perf_counter()
        decision_times.append(t1 - t0)
        iteration_times.append(t2 - t0)
        for _ in finished:
            scheduler.submit(_request(rng, next(ids), now))
    return {
        "decision_us": statistics.median(decision_times) * 1e6,
        "decision_p99_us": sorted(decision_times)[int(0.99 * len(decision_times))] * 1e6,
        "iteration_us": statistics.median(iteration_times) * 1e6,
        "arrival_us": arrival_us,
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scheduler.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100,1000,10000,100000")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--iterations", type=int, default=2000)
    ap.add_argument("--policy", default="semantic")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    results = {n: bench_size(n, batch=args.batch, iterations=args.iterations, policy=args.policy) for n in sizes}
    out = {
        key: {str(n): round(results[n][key], 2) for n in sizes}
        for key in ("decision_us", "arrival_us", "decision_p99_us", "iteration_us")
    }
    if args.json:
        print(json.dumps(out))
    else:
        print(f"policy {args.policy}, batch {args.batch}, {args.iterations} iterations per size (median µs)")
        print(f"{'waiting':>9}{'decision':>10}{'p99':>10}{'+complete':>11}{'arrival':>9}")
        for n in sizes:
            r = results[n]
            print(f"{n:>9}{r['decision_us']:>10.1f}{r['decision_p99_us']:>10.1f}{r['iteration_us']:>11.1f}"
                  f"{r['arrival_us']:>9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
