"""The deterministic discrete-event simulator: the live engine's loop with the model replaced by the cost model.

    decision = scheduler.schedule(clock)            # the same scheduler objects the engine drives
    clock += cost of the decision's swaps + its batch (prefill: sum over requests; decode: one step)
    scheduler.complete_iteration(clock, decision, finished)

A virtual clock and one seeded ``random.Random``: nothing reads wall-clock time or global random state, so the
same arguments print byte-identical JSON. Arrivals that land during an iteration are submitted at its end
with their true arrival time (waiting counts from arrival). Batching is charged honestly (a decode step costs
gamma1 * sum(context) + gamma2, not b steps, nor the max over the batch) and memory binds (KV blocks against
the preset's capacity, with evictions and their swap or recompute costs).

CLI: ``python -m scheduler.simulate --policy semantic,fcfs --profile a100-4b --workload paper --gap 1.0
--concurrency 100 --seed 0 [--json] [--plot out.png]`` (``--help`` for the rest).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from scheduler.config import ESI_LEVELS, EVICTION_MODES, STAGE_MERGE_MODES, SchedulerConfig, scheduling_level
from scheduler.cost import PRESETS, CostModel
from scheduler.decision import Decision
from scheduler.metrics import RequestOutcome, TdgAccumulator, by_esi, slo_targets, summarise
from scheduler.policies import POLICIES, BaseScheduler, make_scheduler
from scheduler.request import Request, Stage
from scheduler.slo import SimulatedSurgeLoop
from scheduler.workloads import (
    Arrival,
    Prediction,
    UrgencyErrorModel,
    burst_workload,
    mass_casualty_workload,
    paper_workload,
    poisson_workload,
    predict,
    trace_workload,
)


def iteration_s(decision: Decision, cost: CostModel) -> float:
    """Seconds the executor spends on a decision: the batch (swap-ins, prefills of pending tokens, one shared
    decode step for the members that only decode) overlapped with the evictions' swap-outs (a copy engine),
    plus the per-iteration overhead."""
    swap_out = cost.beta_s_per_token * sum(p.kept_tokens for p in decision.preemptions)
    t = 0.0
    decode_context = 0
    decoders = 0
    for r in decision.batch:
        context = r.prompt_tokens + r.generated_tokens
        cached = r.kv_tokens_on_device + r.kv_tokens_on_host
        pending = context - cached
        if r.kv_tokens_on_host:
            t += cost.beta_s_per_token * r.kv_tokens_on_host
        if pending > 1 or r.generated_tokens == 0:
            t += cost.prefill_s(pending, cached)
        else:
            decode_context += context
            decoders += 1
    if decoders:
        t += cost.gamma1 * decode_context + cost.gamma2
    return cost.iteration_overhead_s + max(t, swap_out)


@dataclass
class SimResult:
    policy: str
    config: dict[str, Any]
    outcomes: list[RequestOutcome]
    preemptions: int
    swapped_tokens: int
    recomputed_tokens: int
    peak_kv_blocks: int
    makespan_s: float
    generated_tokens: int
    tdg_ratio: float
    iterations: int
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        span = max(self.makespan_s, 1e-9)
        return {
            "policy": self.policy,
            "config": self.config,
            "by_esi": by_esi(self.outcomes),
            "overall": summarise(self.outcomes),
            "preemptions": self.preemptions,
            "swapped_tokens": self.swapped_tokens,
            "recomputed_tokens": self.recomputed_tokens,
            "peak_kv_blocks": self.peak_kv_blocks,
            "throughput_tokens_per_s": round(self.generated_tokens / span, 3),
            "tdg_ratio": round(self.tdg_ratio, 6),
            "iterations": self.iterations,
            "makespan_s": round(self.makespan_s, 6),
            **self.extra,
        }


Observer = Callable[[float, Decision, BaseScheduler], None]


def drive(
    scheduler: BaseScheduler, requests: Sequence[Request], cost: CostModel, *, observer: Observer | None = None,
    on_token: Callable[[Request, int, float], None] | None = None, progress: Any = None,
) -> tuple[list[Request], float, int, int]:
    """The executor loop over ``requests`` (sorted by arrival, ``true_output_tokens`` set) until all are done
    or cancelled. ``observer(clock, decision, scheduler)`` sees every decision before it runs. Returns
    (finished requests in completion order, final clock, iterations, tokens generated)."""
    clock = requests[0].arrival_s if requests else 0.0
    nxt = iterations = generated = 0
    done: list[Request] = []
    while nxt < len(requests) or scheduler.has_work():
        while nxt < len(requests) and requests[nxt].arrival_s <= clock:
            scheduler.submit(requests[nxt])
            nxt += 1
        if not scheduler.has_work():
            clock = requests[nxt].arrival_s
            continue
        decision = scheduler.schedule(clock)
        if observer is not None:
            observer(clock, decision, scheduler)
        done.extend(decision.cancelled)
        if decision.is_idle:
            if nxt >= len(requests):
                if not scheduler.requests:
                    continue  # only control messages were pending
                raise RuntimeError("deadlock: work left but nothing fits in KV memory")
            clock = max(clock, requests[nxt].arrival_s)
            continue
        clock += iteration_s(decision, cost)
        iterations += 1
        finished = []
        for r in decision.batch:
            index = r.generated_tokens + 1
            if on_token is not None:
                on_token(r, index, clock)
            if index >= r.true_output_tokens:
                finished.append(r.id)
        generated += len(decision.batch)
        scheduler.complete_iteration(clock, decision, finished)
        if finished:
            done.extend(r for r in decision.batch if r.stage is Stage.DONE)
            if progress is not None:
                progress.update(len(finished))
    return done, clock, iterations, generated


def simulate(
    config: SchedulerConfig, cost: CostModel, arrivals: Sequence[Arrival], predictions: Sequence[Prediction],
    *, progress: bool = False, uncertainty_rule: bool = True, surge_control: bool = False,
) -> SimResult:
    """Run one policy over a workload to completion; deterministic. O(iterations x b + n log n).
    ``uncertainty_rule``: a prediction that names an alternative level is scheduled at the more urgent of the two
    (``scheduler.config.scheduling_level``), as the live triage stage does. ``surge_control``: the SLO monitor
    and surge controller (``scheduler.slo``) switch the configuration as the live worker's do; the mode changes
    are in ``extra["surge_modes"]``."""
    scheduler = make_scheduler(config, cost)
    order = sorted(range(len(arrivals)), key=lambda i: (arrivals[i].t_s, i))
    requests: list[Request] = []
    for i in order:
        a, p = arrivals[i], predictions[i]
        tier = config.tier_for(None, a.esi)  # SLOs follow the true level
        requests.append(Request(
            id=str(i), level=scheduling_level(p.level, p.alternative if uncertainty_rule else None),
            arrival_s=a.t_s, prompt_tokens=a.prompt_tokens,
            predicted_output_tokens=p.output_tokens, true_output_tokens=a.output_tokens,
            payload={"true_level": a.esi, "tier": tier},
        ))
    tdg = TdgAccumulator()
    surge = SimulatedSurgeLoop(config) if surge_control else None

    def on_token(r: Request, index: int, t_s: float) -> None:
        tier = r.payload["tier"]
        tdg.token(index=index, t_s=t_s, arrival_s=r.arrival_s, ttft_target_s=tier.ttft_target_mean_s,
                  tpot_target_s=tier.tpot_target_s, weight=tier.tdg_weight)
        if surge is not None:
            surge.on_token(r, index, t_s)

    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(requests), desc=config.policy, unit="req", file=sys.stderr, leave=False)
    done, clock, iterations, generated = drive(scheduler, requests, cost, on_token=on_token, progress=bar,
                                               observer=surge.observe if surge is not None else None)
    if bar is not None:
        bar.close()
    def outcome(r: Request) -> RequestOutcome:
        ttft_target_s, e2e_target_s = slo_targets(r.payload["tier"])
        return RequestOutcome(
            esi=r.payload["true_level"], arrival_s=r.arrival_s, first_token_s=r.first_token_s, finish_s=r.finish_s,
            output_tokens=r.generated_tokens, preemptions=r.preemptions,
            ttft_target_s=ttft_target_s, e2e_target_s=e2e_target_s, tpot_target_s=r.payload["tier"].tpot_target_s,
        )

    outcomes = [outcome(r) for r in done]
    outcomes.sort(key=lambda o: (o.arrival_s, o.esi, o.finish_s))
    start = requests[0].arrival_s if requests else 0.0
    return SimResult(
        policy=config.policy, config=_config_summary(config, cost), outcomes=outcomes,
        preemptions=scheduler.preemptions, swapped_tokens=scheduler.swapped_tokens,
        recomputed_tokens=scheduler.recomputed_tokens, peak_kv_blocks=scheduler.memory.peak_blocks,
        makespan_s=clock - start, generated_tokens=generated, tdg_ratio=tdg.ratio, iterations=iterations,
        extra={"surge_modes": surge.changes} if surge is not None else {},
    )


def _config_summary(config: SchedulerConfig, cost: CostModel) -> dict[str, Any]:
    return {
        "policy": config.policy, "batch_size": config.batch_size, "kv_capacity_blocks": config.kv_capacity_blocks,
        "block_size": config.block_size, "preempt_on_arrival": config.preempt_on_arrival,
        "limited_preemption_c": config.limited_preemption_c, "aging_enabled": config.aging_enabled,
        "aging_step_s": sorted({t.aging_step_s for t in config.tiers.values()}),
        "eviction": config.eviction, "stage_merge": config.stage_merge,
        "lower_prefill_share": config.lower_prefill_share, "preempt_within_level": config.preempt_within_level,
        "profile": cost.name,
    }


# --- CLI ------------------------------------------------------------------------------------------------

def build_workload(args: argparse.Namespace) -> tuple[list[Arrival], list[Prediction]]:
    rng = random.Random(args.seed)
    if args.workload == "paper":
        arrivals = paper_workload(rng, gap_s=args.gap, concurrency=args.concurrency, slots=args.slots)
    elif args.workload == "poisson":
        arrivals = poisson_workload(rng, rate_per_s=args.rate, requests=args.requests)
    elif args.workload == "mass-casualty":
        arrivals = mass_casualty_workload(rng, background_rate_per_s=args.rate, duration_s=args.duration,
                                          burst_size=args.concurrency, burst_at_s=args.burst_at)
    elif args.workload == "burst":
        arrivals = burst_workload(rng, bursts=args.slots, burst_size=args.concurrency, gap_s=args.gap,
                                  background_rate_per_s=args.rate if args.rate else 0.0)
    else:
        if not args.trace:
            raise SystemExit("--workload trace needs --trace FILE.jsonl")
        with open(args.trace, encoding="utf-8") as f:
            arrivals = trace_workload(f)
    if args.levels:  # the same calls, only these true levels: e.g. the ESI-1 calls replayed alone (a floor)
        keep = {int(level) for level in args.levels.split(",")}
        arrivals = [a for a in arrivals if a.esi in keep]
    predictions = predict(
        random.Random(args.seed + 1), arrivals, exact_lengths=args.true_lengths,
        urgency_error_rate=args.urgency_error, urgency_error_distance=args.urgency_error_distance,
        length_error_rate=args.length_error, length_error_distance=args.length_error_distance,
        urgency_errors=UrgencyErrorModel.read(args.urgency_confusion) if args.urgency_confusion else None,
    )
    return arrivals, predictions


def build_config(args: argparse.Namespace, policy: str, cost: CostModel) -> SchedulerConfig:
    config = SchedulerConfig(
        policy=policy, batch_size=args.batch,
        kv_capacity_blocks=args.kv_blocks or cost.kv_capacity_blocks(args.block_size), block_size=args.block_size,
        preempt_on_arrival=not args.no_preempt, limited_preemption_c=args.limited_preemption,
        aging_enabled=args.aging_step > 0, eviction=args.eviction, stage_merge=args.stage_merge,
        lower_prefill_share=args.lower_prefill_share, preempt_within_level=args.preempt_within_level,
    )
    tiers = {}
    for name, tier in config.tiers.items():
        changes: dict[str, Any] = {}
        if min(tier.esi_levels, default=1) > 1:  # ESI 1 has no better level to age into
            changes["aging_step_s"] = args.aging_step
        if args.max_preemptions is not None:
            changes["max_preemptions"] = args.max_preemptions
        tiers[name] = replace(tier, **changes)
    return config.with_changes(tiers=tiers)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m scheduler.simulate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", default="semantic", help=f"comma-separated, from {','.join(POLICIES)}")
    ap.add_argument("--profile", default="a100-4b", choices=sorted(PRESETS))
    ap.add_argument("--workload", default="paper", choices=("paper", "poisson", "burst", "mass-casualty", "trace"))
    ap.add_argument("--gap", type=float, default=1.0, help="seconds between arrival slots (paper, burst)")
    ap.add_argument("--concurrency", type=int, default=100, help="max requests per slot (paper), burst size")
    ap.add_argument("--slots", type=int, default=20, help="arrival slots (paper), bursts (burst)")
    ap.add_argument("--rate", type=float, default=10.0, help="arrivals per second (poisson; burst background)")
    ap.add_argument("--requests", type=int, default=1000, help="number of requests (poisson)")
    ap.add_argument("--trace", help="JSONL trace: t, esi, prompt_tokens, output_tokens")
    ap.add_argument("--duration", type=float, default=300.0, help="seconds of background (mass-casualty)")
    ap.add_argument("--burst-at", type=float, default=60.0, help="when the burst lands (mass-casualty)")
    ap.add_argument("--surge-control", action="store_true", help="the SLO monitor switches the configuration")
    ap.add_argument("--levels", help="keep only these true ESI levels of the workload (e.g. 1: the ESI-1 floor)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=SchedulerConfig.batch_size)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--kv-blocks", type=int, default=None, help="override the profile's KV capacity")
    ap.add_argument("--eviction", default=SchedulerConfig.eviction, choices=EVICTION_MODES)
    ap.add_argument("--stage-merge", default=SchedulerConfig.stage_merge, choices=STAGE_MERGE_MODES,
                    help="what may join p*'s iterations (scheduler/config.py)")
    ap.add_argument("--lower-prefill-share", type=float, default=SchedulerConfig.lower_prefill_share,
                    metavar="RHO", help="share of p*'s decode time less urgent prefills may take (0: Algorithm 3)")
    ap.add_argument("--no-preempt", action="store_true", help="no preemption on arrival")
    ap.add_argument("--preempt-within-level", action=argparse.BooleanOptionalAction,
                    default=SchedulerConfig.preempt_within_level,
                    help="semantic: a shorter request of the same level may displace a running one")
    ap.add_argument("--limited-preemption", type=float, default=None, metavar="C")
    ap.add_argument("--max-preemptions", type=int, default=None, help="per-request cap (default: tiers' 8)")
    ap.add_argument("--aging-step", type=float, default=0.0, help="seconds per level of aging (0: off)")
    ap.add_argument("--true-lengths", action="store_true", help="predict output lengths exactly")
    ap.add_argument("--urgency-error", type=float, default=0.0, metavar="R")
    ap.add_argument("--urgency-error-distance", type=int, default=1)
    ap.add_argument("--urgency-confusion", metavar="FILE",
                    help="draw urgency verdicts from our classifier's measured ones (evaluate_triage --urgency-errors);"
                         " with --urgency-error R, at error rate R in the same shape")
    ap.add_argument("--uncertainty-rule", action=argparse.BooleanOptionalAction, default=True,
                    help="schedule an uncertain verdict at the more urgent of its two levels")
    ap.add_argument("--length-error", type=float, default=0.0, metavar="R")
    ap.add_argument("--length-error-distance", type=int, default=2, help="in 50-token buckets")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--plot", help="write a per-ESI waiting-time bar chart (PNG)")
    ap.add_argument("--no-progress", action="store_true")
    return ap.parse_args(argv)


def format_table(results: Sequence[dict[str, Any]]) -> str:
    head = f"{'policy':<9}" + "".join(f"{'ESI' + k + ' wait':>12}" for k in "12345")
    head += f"{'all wait':>10}{'ESI1 p99':>10}{'ESI5 p99':>10}{'preempt':>9}{'tok/s':>8}{'TDG':>6}"
    lines = [head, "-" * len(head)]
    for res in results:
        by = res["by_esi"]
        row = f"{res['policy']:<9}" + "".join(f"{by[k].get('wait_mean', 0):>12.2f}" for k in "12345")
        row += f"{res['overall']['wait_mean']:>10.2f}{by['1'].get('wait_p99', 0):>10.2f}"
        row += f"{by['5'].get('wait_p99', 0):>10.2f}{res['preemptions']:>9d}"
        row += f"{res['throughput_tokens_per_s']:>8.0f}{res['tdg_ratio']:>6.2f}"
        lines.append(row)
    return "\n".join(lines)


def plot(results: Sequence[dict[str, Any]], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.8 / max(1, len(results))
    for i, res in enumerate(results):
        xs = [k + (i - (len(results) - 1) / 2) * width for k in range(5)]
        ax.bar(xs, [res["by_esi"][str(k + 1)].get("wait_mean", 0) for k in range(5)], width, label=res["policy"])
    ax.set_xticks(range(len(ESI_LEVELS)), [f"ESI {k}" for k in ESI_LEVELS])
    ax.set_ylabel("mean waiting time (s)")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        raise SystemExit(f"unknown policy {unknown}; choose from {sorted(POLICIES)}")
    cost = PRESETS[args.profile]
    arrivals, predictions = build_workload(args)
    progress = not args.no_progress and len(arrivals) >= 2000
    results = [
        simulate(build_config(args, p, cost), cost, arrivals, predictions, progress=progress,
                 uncertainty_rule=args.uncertainty_rule, surge_control=args.surge_control).to_json()
        for p in policies
    ]
    if args.json:
        print(json.dumps(results[0] if len(results) == 1 else results, sort_keys=False))
    else:
        print(f"{args.workload} workload, {len(arrivals)} requests, profile {args.profile}, batch {args.batch}, "
              f"seed {args.seed}; mean waiting time (s) by true ESI level")
        print(format_table(results))
    if args.plot:
        title = f"{args.profile}, {args.workload} gap {args.gap} s, concurrency {args.concurrency}, batch {args.batch}"
        plot(results, args.plot, title)
    return 0


if __name__ == "__main__":
    sys.exit(main())
