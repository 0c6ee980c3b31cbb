"""The surge controller in simulation: a mass-casualty burst on a Poisson background, with the controller off and
on, beside the floors (the ESI-1 calls replayed alone; the ESI-1 and ESI-2 calls alone), seeds averaged.

    python -m scheduler.surge_bench --profiles a100-4b,a5000-7b --seeds 5

Per run: ESI-1 and ESI-2 TTFT and TPOT attainment (the share of calls within the tier's mean target), the
ESI-5 p99 wait, calls completed of calls arrived, and the mode changes (controller on).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from typing import Any

from scheduler.cost import PRESETS
from scheduler.simulate import build_config, build_workload, parse_args
from scheduler.simulator import simulate

WORKLOAD = "--workload mass-casualty --rate 2 --concurrency 300 --duration 300 --burst-at 60"
RUNS = (("all calls", (), False), ("all calls", (), True), ("ESI 1 alone", ("--levels", "1"), False),
        ("ESI 1 alone", ("--levels", "1"), True), ("ESI 1-2 alone", ("--levels", "1,2"), False),
        ("ESI 1-2 alone", ("--levels", "1,2"), True))


def run(profile: str, seed: int, extra: Sequence[str], surge: bool) -> dict[str, Any]:
    args = parse_args([*WORKLOAD.split(), "--profile", profile, "--seed", str(seed), "--no-progress", *extra])
    cost = PRESETS[profile]
    arrivals, predictions = build_workload(args)
    result = simulate(build_config(args, "semantic", cost), cost, arrivals, predictions, surge_control=surge).to_json()
    by = result["by_esi"]

    def get(level: str, key: str) -> float | None:
        return by[level].get(key) if by[level].get("count") else None

    return {"esi1_ttft": get("1", "ttft_attainment"), "esi1_tpot": get("1", "tpot_attainment"),
            "esi2_ttft": get("2", "ttft_attainment"), "esi2_tpot": get("2", "tpot_attainment"),
            "esi5_wait_p99": get("5", "wait_p99"), "completed": result["overall"]["count"],
            "arrived": len(arrivals), "mode_changes": len(result.get("surge_modes", []))}


def mean(values: Sequence[float | None]) -> float | None:
    xs = [v for v in values if v is not None]
    return statistics.fmean(xs) if xs else None


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scheduler.surge_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--profiles", default="a100-4b,a5000-7b")
    ap.add_argument("--seeds", type=int, default=5)
    args = ap.parse_args(argv)
    print(f"{WORKLOAD}; seeds 0..{args.seeds - 1} averaged; attainment = share within the tier's mean target")
    head = f"{'profile':<10}{'run':<16}{'controller':<11}{'ESI1 TTFT':>10}{'ESI1 TPOT':>10}{'ESI2 TTFT':>10}"
    print(head + f"{'ESI2 TPOT':>10}{'ESI5 p99 s':>11}{'completed':>12}{'changes':>8}")
    for profile in args.profiles.split(","):
        for name, extra, surge in RUNS:
            rows = [run(profile, seed, extra, surge) for seed in range(args.seeds)]

            def cell(key: str, rows: list[dict[str, Any]] = rows) -> str:
                value = mean([r[key] for r in rows])
                return f"{value:>10.3f}" if value is not None else " " * 9 + "-"

            p99 = mean([r["esi5_wait_p99"] for r in rows])
            p99_cell = f"{p99:>11.1f}" if p99 is not None else " " * 10 + "-"
            done = f"{sum(r['completed'] for r in rows)}/{sum(r['arrived'] for r in rows)}"
            print(f"{profile:<10}{name:<16}{'on' if surge else 'off':<11}{cell('esi1_ttft')}{cell('esi1_tpot')}"
                  f"{cell('esi2_ttft')}{cell('esi2_tpot')}{p99_cell}"
                  f"{done:>12}{sum(r['mode_changes'] for r in rows) / len(rows):>8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
