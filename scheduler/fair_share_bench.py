"""Fair share across call systems in simulation: one call system floods the centre while another keeps its
usual traffic, fair share (weighted VTC, policies/fair_share.py) off and on, seeds averaged.

    python -m scheduler.fair_share_bench --profile a100-4b --seeds 5

Call system "county": a dispatch centre's day (Poisson, 1.5 calls/s, the dispatch ESI mix) for 240 s. Call
system "flood": from 60 s to 120 s, 12 calls/s of ESI 3-5 (a feed replaying its backlog, or a system stuck
retrying). The same levels, so only fair share can keep county's ESI 3-5 calls from waiting behind the flood.
Per call system and level: mean and p90 wait for the first token (s), and calls completed of calls arrived.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from collections.abc import Sequence
from typing import Any

from scheduler.config import ESI_LEVELS, SchedulerConfig
from scheduler.cost import PRESETS
from scheduler.metrics import percentile
from scheduler.policies import make_scheduler
from scheduler.request import Request
from scheduler.simulator import drive
from scheduler.workloads import DISPATCH_CENTRE_ESI_MIX

CLIENTS = ("county", "flood")
FLOOD_MIX = {3: 0.4, 4: 0.4, 5: 0.2}


def _poisson(rng: random.Random, client: str, rate: float, start: float, end: float,
             mix: dict[int, float]) -> list[tuple[float, str, int]]:
    t, out = start, []
    levels, weights = zip(*sorted(mix.items()), strict=True)
    while True:
        t += rng.expovariate(rate)
        if t >= end:
            return out
        out.append((t, client, rng.choices(levels, weights)[0]))


def workload(seed: int) -> list[Request]:
    """Both call systems' calls in arrival order; the length predictor is exact (fair share is the variable)."""
    rng = random.Random(seed)
    calls = _poisson(rng, "county", 1.5, 0.0, 240.0, dict(DISPATCH_CENTRE_ESI_MIX))
    calls += _poisson(rng, "flood", 12.0, 60.0, 120.0, FLOOD_MIX)
    calls.sort()
    requests = []
    for i, (t, client, level) in enumerate(calls):
        out = rng.randint(1, 499)
        requests.append(Request(id=str(i), level=level, arrival_s=t, prompt_tokens=rng.randint(1, 499),
                                predicted_output_tokens=out, true_output_tokens=out, client=client))
    return requests


def run(profile: str, seed: int, fair_share: bool) -> dict[str, Any]:
    cost = PRESETS[profile]
    config = SchedulerConfig(fair_share=fair_share, kv_capacity_blocks=cost.kv_capacity_blocks(16), block_size=16)
    requests = workload(seed)
    done, *_ = drive(make_scheduler(config, cost), requests, cost)
    waits: dict[tuple[str, int], list[float]] = {}
    for r in done:
        waits.setdefault((r.client, r.level), []).append(r.first_token_s - r.arrival_s)
    return {"waits": waits, "completed": len(done), "arrived": len(requests)}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scheduler.fair_share_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="a100-4b", choices=sorted(PRESETS))
    ap.add_argument("--seeds", type=int, default=5)
    args = ap.parse_args(argv)
    print(f"profile {args.profile}; seeds 0..{args.seeds - 1}, each call system's waits pooled; wait = first token"
          " minus arrival, s")
    print(f"{'fair share':<11}{'call system':<13}{'level':>6}{'calls':>7}{'mean wait':>11}{'p90 wait':>10}")
    for fair in (False, True):
        runs = [run(args.profile, seed, fair) for seed in range(args.seeds)]
        for client in CLIENTS:
            for level in ESI_LEVELS:
                waits = [w for r in runs for w in r["waits"].get((client, level), [])]
                if waits:
                    print(f"{'on' if fair else 'off':<11}{client:<13}{level:>6}{len(waits):>7}"
                          f"{statistics.fmean(waits):>11.2f}{percentile(waits, 90):>10.2f}")
        print(f"{'on' if fair else 'off':<11}completed {sum(r['completed'] for r in runs)}"
              f"/{sum(r['arrived'] for r in runs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
