"""The simulator's command line: builds the workload, the predictions and the configuration from the arguments,
runs ``scheduler.simulator.simulate`` per policy and prints a table, JSON or a plot.

    python -m scheduler.simulate --policy semantic,fcfs --profile a100-4b --workload paper --gap 1.0 \
        --concurrency 100 --seed 0 [--json] [--plot out.png]        (--help for the rest)

With ``--replicas N`` each policy runs on N engines behind the router, once per ``--routing`` rule
(``scheduler.replica_simulator``).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from scheduler import simulator
from scheduler.config import ESI_LEVELS, EVICTION_MODES, STAGE_MERGE_MODES, SchedulerConfig
from scheduler.cost import PRESETS, CostModel
from scheduler.drafting import DraftProfile
from scheduler.policies import POLICIES
from scheduler.replica_simulator import simulate_replicas
from scheduler.routing import DEFAULT_ROUTING, ROUTING_RULES, RoutingRule
from scheduler.simulator import simulate
from scheduler.triage_stage import BATCHING_MODES, ClassifierCost, TriageStage
from scheduler.workloads import (
    Arrival,
    Prediction,
    UrgencyErrorModel,
    burst_workload,
    dispatch_workload,
    mass_casualty_workload,
    paper_workload,
    poisson_workload,
    predict,
    trace_workload,
)


def build_workload(args: argparse.Namespace) -> tuple[list[Arrival], list[Prediction]]:
    rng = random.Random(args.seed)
    if args.workload == "paper":
        arrivals = paper_workload(rng, gap_s=args.gap, concurrency=args.concurrency, slots=args.slots)
    elif args.workload == "poisson":
        arrivals = poisson_workload(rng, rate_per_s=args.rate, requests=args.requests)
    elif args.workload == "dispatch":
        arrivals = dispatch_workload(rng, rate_per_s=args.rate, requests=args.requests)
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


def triage_stage(args: argparse.Namespace) -> TriageStage | None:
    if not args.triage_stage:
        return None
    return TriageStage(args.triage_stage, ClassifierCost.parse(args.triage_cost), batch_max=args.triage_batch,
                       linger_s=args.triage_linger_ms / 1000.0, workers=args.triage_workers)


def drafting(args: argparse.Namespace) -> DraftProfile | None:
    return DraftProfile.parse(args.draft_tokens, args.draft_acceptance, args.seed) if args.draft_tokens else None


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m scheduler.simulate",
                                 description=(simulator.__doc__ or "").split("\n\n")[0])
    ap.add_argument("--policy", default="semantic", help=f"comma-separated, from {','.join(POLICIES)}")
    ap.add_argument("--profile", default="a100-4b", choices=sorted(PRESETS))
    ap.add_argument("--workload", default="paper", choices=("paper", "poisson", "dispatch", "burst", "mass-casualty", "trace"),
                    help="dispatch: Poisson at --rate with a dispatch centre's ESI mix (3/17/40/28/12 %%)")
    ap.add_argument("--gap", type=float, default=1.0, help="seconds between arrival slots (paper, burst)")
    ap.add_argument("--concurrency", type=int, default=100, help="max requests per slot (paper), burst size")
    ap.add_argument("--slots", type=int, default=20, help="arrival slots (paper), bursts (burst)")
    ap.add_argument("--rate", type=float, default=10.0, help="arrivals per second (poisson, dispatch; burst background)")
    ap.add_argument("--requests", type=int, default=1000, help="number of requests (poisson, dispatch)")
    ap.add_argument("--replicas", type=int, default=1, help="engines behind the router (each runs --policy)")
    ap.add_argument("--routing", default=DEFAULT_ROUTING,
                    help=f"with --replicas: comma-separated, from {','.join(ROUTING_RULES)}")
    ap.add_argument("--reserve-slots", type=int, default=RoutingRule.reserve_slots,
                    help="gorouting: free slots across the pool kept for ESI 1-2")
    ap.add_argument("--replica-profiles", default="",
                    help="with --replicas: a cost profile per replica, comma-separated (a mixed fleet)")
    ap.add_argument("--max-unstarted", type=int, default=4,
                    help="with --replicas: calls a replica may hold that await their first token (as the pool)")
    ap.add_argument("--trace", help="JSONL trace: t, esi, prompt_tokens, output_tokens")
    ap.add_argument("--duration", type=float, default=300.0, help="seconds of background (mass-casualty)")
    ap.add_argument("--burst-at", type=float, default=60.0, help="when the burst lands (mass-casualty)")
    ap.add_argument("--surge-control", action="store_true", help="the SLO monitor switches the configuration")
    ap.add_argument("--triage-stage", choices=BATCHING_MODES, help="a predictor stage before the LLM queue")
    ap.add_argument("--triage-cost", default="15,7.5", help="classifier ms per batch,per call (tools.classifier_cost)")
    ap.add_argument("--triage-batch", type=int, default=32)
    ap.add_argument("--triage-linger-ms", type=float, default=50.0)
    ap.add_argument("--triage-workers", type=int, default=1)
    ap.add_argument("--levels", help="keep only these true ESI levels of the workload (e.g. 1: the ESI-1 floor)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=SchedulerConfig.batch_size)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--kv-blocks", type=int, default=None, help="override the profile's KV capacity")
    ap.add_argument("--beta", type=float, default=None, metavar="S",
                    help="override the profile's swap cost, seconds per token each way (a slower host link)")
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
    ap.add_argument("--draft-tokens", type=int, default=0, metavar="K",
                    help="speculative decoding: K drafts per decoding request and step (scheduler.drafting)")
    ap.add_argument("--draft-acceptance", default="1.0", metavar="LOW[,HIGH]",
                    help="per-token acceptance probability of a request, drawn uniformly in [LOW, HIGH]")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--plot", help="write a per-ESI waiting-time bar chart (PNG)")
    ap.add_argument("--no-progress", action="store_true")
    return ap.parse_args(argv)


def format_table(results: Sequence[dict[str, Any]]) -> str:
    width = max([9] + [len(res["policy"]) + 1 for res in results])
    head = f"{'policy':<{width}}" + "".join(f"{'ESI' + k + ' wait':>12}" for k in "12345")
    head += f"{'all wait':>10}{'ESI1 p99':>10}{'ESI5 p99':>10}{'ESI1 TTFT50':>12}{'TTFT99':>8}{'preempt':>9}"
    head += f"{'tok/s':>8}{'TDG':>7}" + (f"{'accept':>8}" if "draft_acceptance" in results[0] else "")
    lines = [head, "-" * len(head)]
    for res in results:
        by = res["by_esi"]
        row = f"{res['policy']:<{width}}" + "".join(f"{by[k].get('wait_mean', 0):>12.2f}" for k in "12345")
        row += f"{res['overall']['wait_mean']:>10.2f}{by['1'].get('wait_p99', 0):>10.2f}"
        row += f"{by['5'].get('wait_p99', 0):>10.2f}{by['1'].get('ttft_p50', 0):>12.3f}{by['1'].get('ttft_p99', 0):>8.3f}"
        row += f"{res['preemptions']:>9d}{res['throughput_tokens_per_s']:>8.0f}{res['tdg_ratio']:>7.3f}"
        if "draft_acceptance" in res:
            row += f"{res['draft_acceptance'] or 0:>8.3f}"
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
    if args.beta is not None:
        cost = replace(cost, beta_s_per_token=args.beta, name=f"{cost.name}, beta {args.beta:g}")
    arrivals, predictions = build_workload(args)
    progress = not args.no_progress and len(arrivals) >= 2000
    if args.replicas > 1:
        rules = [RoutingRule(name.strip(), reserve_slots=args.reserve_slots) for name in args.routing.split(",")]
        results = [
            simulate_replicas(build_config(args, p, cost), cost, arrivals, predictions, replicas=args.replicas,
                              rule=rule, max_unstarted=args.max_unstarted,
                              replica_costs=[PRESETS[p] for p in args.replica_profiles.split(",") if p],
                              uncertainty_rule=args.uncertainty_rule).to_json()
            for p in policies for rule in rules
        ]
    else:
        results = [
            simulate(build_config(args, p, cost), cost, arrivals, predictions, progress=progress,
                     uncertainty_rule=args.uncertainty_rule, surge_control=args.surge_control,
                     triage=triage_stage(args), drafting=drafting(args)).to_json()
            for p in policies
        ]
    if args.json:
        print(json.dumps(results[0] if len(results) == 1 else results, sort_keys=False))
    else:
        print(f"{args.workload} workload, {len(arrivals)} requests, profile {args.profile}, batch {args.batch}, "
              f"{args.replicas} replica(s), seed {args.seed}; mean waiting time (s) by true ESI level")
        print(format_table(results))
    if args.plot:
        title = f"{args.profile}, {args.workload} gap {args.gap} s, concurrency {args.concurrency}, batch {args.batch}"
        plot(results, args.plot, title)
    return 0


if __name__ == "__main__":
    sys.exit(main())
