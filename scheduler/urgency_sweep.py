"""How much urgency errors cost the most urgent calls, and how much the uncertainty rule gives back.

Hua et al. measure the true-ESI-1 mean wait growing 3.5-7.3x as their urgency predictor's error rate rises
from 0.1 to 0.9 (errors one level away in a random direction). Our classifier errs differently: its errors
have a shape (which levels it confuses, and which calls it marks uncertain and towards which level), measured
on an evaluation set and written by ``python manage.py evaluate_triage --urgency-errors FILE``. This command
runs the simulator over the same workloads, seeds averaged:

- error-free, and our classifier's measured errors with and without the uncertainty rule
  (``scheduler.config.scheduling_level``);
- the error sweep r = 0.1..0.9: the paper's error model, and our error shape at rate r with and without the rule.

Every number is the true-ESI-1 mean wait (arrival to first token) over the error-free run's.

    python -m scheduler.urgency_sweep --confusion fixtures/evaluation/urgency-errors-independent.json \
        --plot docs/urgency-error-sweep.png
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from typing import Any

from scheduler.cost import PRESETS
from scheduler.simulate import build_config, build_workload, parse_args
from scheduler.simulator import simulate
from scheduler.workloads import UrgencyErrorModel

SWEEP_RATES = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
# The error models of the sweep: the paper's, ours without the rule, ours with it.
CURVES = (("paper", "paper's errors (one level, random direction)"),
          ("ours_no_rule", "our classifier's error shape, no uncertainty rule"),
          ("ours_rule", "our classifier's error shape, uncertainty rule"))


def esi1_wait(simulator_args: Sequence[str], seeds: Sequence[int], *, confusion: str | None = None,
              error_rate: float = 0.0, rule: bool = True) -> float:
    """The true-ESI-1 mean wait over ``seeds`` (each seed its own workload and predictions)."""
    waits = []
    for seed in seeds:
        argv = [*simulator_args, "--seed", str(seed), "--urgency-error", str(error_rate), "--no-progress"]
        if confusion:
            argv += ["--urgency-confusion", confusion]
        args = parse_args(argv)
        cost = PRESETS[args.profile]
        arrivals, predictions = build_workload(args)
        result = simulate(build_config(args, "semantic", cost), cost, arrivals, predictions, uncertainty_rule=rule)
        waits.append(result.to_json()["by_esi"]["1"]["wait_mean"])
    return statistics.fmean(waits)


def sweep(confusion: str, simulator_args: Sequence[str], seeds: Sequence[int]) -> dict[str, Any]:
    base = esi1_wait(simulator_args, seeds)
    model = UrgencyErrorModel.read(confusion)
    measured = {rule: esi1_wait(simulator_args, seeds, confusion=confusion, rule=rule) for rule in (True, False)}
    curves: dict[str, list[float]] = {name: [] for name, _ in CURVES}
    for rate in SWEEP_RATES:
        curves["paper"].append(esi1_wait(simulator_args, seeds, error_rate=rate))
        curves["ours_no_rule"].append(esi1_wait(simulator_args, seeds, confusion=confusion, error_rate=rate, rule=False))
        curves["ours_rule"].append(esi1_wait(simulator_args, seeds, confusion=confusion, error_rate=rate, rule=True))
    return {
        "simulator": " ".join(simulator_args), "seeds": list(seeds), "confusion": confusion,
        "confusion_source": model.source, "measured_error_rate": round(model.error_rate(), 4),
        "esi1_wait_error_free_s": round(base, 3),
        "measured": {"rule_wait_s": round(measured[True], 3), "rule_ratio": round(measured[True] / base, 3),
                     "no_rule_wait_s": round(measured[False], 3), "no_rule_ratio": round(measured[False] / base, 3)},
        "sweep": {"rates": list(SWEEP_RATES),
                  **{name: [round(w / base, 3) for w in waits] for name, waits in curves.items()}},
    }


def format_report(report: dict[str, Any]) -> str:
    m = report["measured"]
    lines = [
        f"simulator: {report['simulator']}; seeds {report['seeds'][0]}..{report['seeds'][-1]}",
        f"error model: {report['confusion']} ({report['confusion_source']}), "
        f"measured error rate {report['measured_error_rate']:.3f}",
        f"true-ESI-1 mean wait, error-free: {report['esi1_wait_error_free_s']:.2f} s",
        f"  our measured errors, uncertainty rule:    {m['rule_wait_s']:.2f} s  ({m['rule_ratio']:.2f}x)",
        f"  our measured errors, no uncertainty rule: {m['no_rule_wait_s']:.2f} s  ({m['no_rule_ratio']:.2f}x)",
        "error rate " + "".join(f"{r:>7.1f}" for r in report["sweep"]["rates"]),
    ]
    for name, _ in CURVES:
        lines.append(f"{name:<11}" + "".join(f"{x:>6.2f}x" for x in report["sweep"][name]))
    return "\n".join(lines)


def plot(report: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    rates = report["sweep"]["rates"]
    for name, label in CURVES:
        ax.plot(rates, report["sweep"][name], marker="o", label=label)
    ax.axhline(1.25, color="grey", linestyle=":", label="1.25x the error-free wait")
    ax.set_xlabel("urgency error rate")
    ax.set_ylabel("true-ESI-1 mean wait / error-free")
    ax.set_title(f"{report['simulator']}, {len(report['seeds'])} seeds")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scheduler.urgency_sweep", description=__doc__.split("\n\n")[0])
    ap.add_argument("--confusion", required=True, help="evaluate_triage --urgency-errors FILE")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--simulator", default="--workload paper --gap 1.0 --concurrency 100 --profile a100-4b",
                    help="the simulate arguments every run shares")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--plot", help="write the sweep as a PNG")
    args = ap.parse_args(argv)
    report = sweep(args.confusion, args.simulator.split(), range(args.seeds))
    print(json.dumps(report, indent=1) if args.json else format_report(report))
    if args.plot:
        plot(report, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
