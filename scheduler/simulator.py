"""The deterministic discrete-event simulator: the live engine's loop with the model replaced by the cost model.

    decision = scheduler.schedule(clock)            # the same scheduler objects the engine drives
    clock += cost of the decision's swaps + its batch (prefill: sum over requests; decode: one step)
    scheduler.complete_iteration(clock, decision, finished)

A virtual clock and one seeded ``random.Random``: nothing reads wall-clock time or global random state, so the
same arguments print byte-identical JSON. Arrivals that land during an iteration are submitted at its end
with their true arrival time (waiting counts from arrival). Batching is charged honestly (a decode step costs
gamma1 * sum(context) + gamma2, not b steps, nor the max over the batch) and memory binds (KV blocks against
the preset's capacity, with evictions and their swap or recompute costs).

Its command line: ``python -m scheduler.simulate --policy semantic,fcfs --profile a100-4b --workload paper --gap 1.0
--concurrency 100 --seed 0 [--json] [--plot out.png]`` (``--help`` for the rest).
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler.config import ESI_LEVELS, SchedulerConfig, scheduling_level
from scheduler.cost import CostModel
from scheduler.decision import Decision
from scheduler.drafting import DraftProfile
from scheduler.metrics import (
    RequestOutcome,
    TdgAccumulator,
    by_esi,
    count_token,
    percentile,
    slo_targets,
    summarise,
)
from scheduler.policies import BaseScheduler, make_scheduler
from scheduler.request import Request, Stage
from scheduler.slo import SimulatedSurgeLoop
from scheduler.triage_stage import TriageStage
from scheduler.workloads import Arrival, Prediction


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
    drafting: DraftProfile | None = None,
) -> tuple[list[Request], float, int, int]:
    """The executor loop over ``requests`` (sorted by when they reach the scheduler: ``payload["ready_s"]`` where
    a predictor stage delays them, else their arrival; ``true_output_tokens`` set) until all are done or
    cancelled. ``observer(clock, decision, scheduler)`` sees every decision before it runs. ``drafting``:
    speculative decoding (``scheduler.drafting``; the requests' acceptance already assigned). Returns
    (finished requests in completion order, final clock, iterations, tokens generated)."""
    rng = random.Random(drafting.seed) if drafting is not None else None
    ready = [r.payload.get("ready_s", r.arrival_s) for r in requests]
    clock = ready[0] if requests else 0.0
    nxt = iterations = generated = 0
    done: list[Request] = []
    while nxt < len(requests) or scheduler.has_work():
        while nxt < len(requests) and ready[nxt] <= clock:
            scheduler.submit(requests[nxt])
            nxt += 1
        if not scheduler.has_work():
            clock = ready[nxt]
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
            clock = max(clock, ready[nxt])
            continue
        drafts = drafting.drafts(decision.batch) if drafting is not None else {}
        clock += iteration_s(decision, cost) + (drafting.verify_s(cost, drafts) if drafts else 0.0)
        iterations += 1
        accepted = drafting.verify(decision.batch, drafts, rng) if drafts else None
        before = sum(r.generated_tokens for r in decision.batch) if accepted else 0
        finished = complete(scheduler, decision, clock, on_token, accepted)
        # one token a member, or as many as its accepted drafts gave (up to its true length)
        generated += sum(r.generated_tokens for r in decision.batch) - before if accepted else len(decision.batch)
        done.extend(finished)
        if finished and progress is not None:
            progress.update(len(finished))
    return done, clock, iterations, generated


def complete(scheduler: BaseScheduler, decision: Decision, clock: float,
             on_token: Callable[[Request, int, float], None] | None = None,
             accepted: Mapping[str, int] | None = None) -> list[Request]:
    """End a decision's iteration at ``clock``: each member of the batch gets its next token (and its ``accepted``
    draft tokens before it, up to its true length), those at their true length finish; returns the finished
    requests."""
    finished = []
    emitted = {}
    for r in decision.batch:
        n = min(1 + (accepted or {}).get(r.id, 0), max(1, r.true_output_tokens - r.generated_tokens))
        emitted[r.id] = n
        for index in range(r.generated_tokens + 1, r.generated_tokens + n + 1):
            if on_token is not None:
                on_token(r, index, clock)
        if r.generated_tokens + n >= r.true_output_tokens:
            finished.append(r.id)
    scheduler.complete_iteration(clock, decision, finished, emitted if accepted else None)
    return [r for r in decision.batch if r.stage is Stage.DONE] if finished else []


def simulate(
    config: SchedulerConfig, cost: CostModel, arrivals: Sequence[Arrival], predictions: Sequence[Prediction],
    *, progress: bool = False, uncertainty_rule: bool = True, surge_control: bool = False,
    triage: TriageStage | None = None, drafting: DraftProfile | None = None,
) -> SimResult:
    """Run one policy over a workload to completion; deterministic. O(iterations x b + n log n).
    ``uncertainty_rule``: a prediction that names an alternative level is scheduled at the more urgent of the two
    (``scheduler.config.scheduling_level``), as the live triage stage does. ``surge_control``: the SLO monitor
    and surge controller (``scheduler.slo``) switch the configuration as the live worker's do; the mode changes
    are in ``extra["surge_modes"]``. ``triage``: calls reach the scheduler when the predictor stage has
    classified them (``extra["triage_p50_by_esi"]``: accept to triaged); waits still count from arrival.
    ``drafting``: speculative decoding (``scheduler.drafting``; ``extra["draft_acceptance"]``: accepted/drafted)."""
    scheduler = make_scheduler(config, cost)
    requests = build_requests(config, arrivals, predictions, uncertainty_rule)
    if drafting is not None:
        drafting.assign(requests)
    if triage is not None:
        done_s = triage.triaged_at([r.arrival_s for r in requests], [r.level for r in requests])
        for r, t in zip(requests, done_s, strict=True):
            r.payload["ready_s"] = t
        requests.sort(key=lambda r: (r.payload["ready_s"], r.arrival_s))
    tdg = TdgAccumulator()
    surge = SimulatedSurgeLoop(config) if surge_control else None

    def on_token(r: Request, index: int, t_s: float) -> None:
        count_token(tdg, r.payload["tier"], index=index, t_s=t_s, arrival_s=r.arrival_s)
        if surge is not None:
            surge.on_token(r, index, t_s)

    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(requests), desc=config.policy, unit="req", file=sys.stderr, leave=False)
    done, clock, iterations, generated = drive(scheduler, requests, cost, on_token=on_token, progress=bar,
                                               observer=surge.observe if surge is not None else None,
                                               drafting=drafting)
    if bar is not None:
        bar.close()
    outcomes = outcomes_of(done)
    start = requests[0].arrival_s if requests else 0.0
    return SimResult(
        policy=config.policy, config=config_summary(config, cost), outcomes=outcomes,
        preemptions=scheduler.preemptions, swapped_tokens=scheduler.swapped_tokens,
        recomputed_tokens=scheduler.recomputed_tokens, peak_kv_blocks=scheduler.memory.peak_blocks,
        makespan_s=clock - start, generated_tokens=generated, tdg_ratio=tdg.ratio, iterations=iterations,
        extra={**({"surge_modes": surge.changes} if surge is not None else {}),
               **({"triage_p50_by_esi": _triage_p50(requests)} if triage is not None else {}),
               **({"draft_acceptance": _acceptance(requests)} if drafting is not None else {})},
    )


def build_requests(config: SchedulerConfig, arrivals: Sequence[Arrival], predictions: Sequence[Prediction],
                   uncertainty_rule: bool = True) -> list[Request]:
    """The workload's requests in arrival order, at their predicted level and length; SLOs (the tier in
    ``payload``) follow the true level."""
    order = sorted(range(len(arrivals)), key=lambda i: (arrivals[i].t_s, i))
    requests: list[Request] = []
    for i in order:
        a, p = arrivals[i], predictions[i]
        requests.append(Request(
            id=str(i), level=scheduling_level(p.level, p.alternative if uncertainty_rule else None),
            arrival_s=a.t_s, prompt_tokens=a.prompt_tokens,
            predicted_output_tokens=p.output_tokens, true_output_tokens=a.output_tokens,
            payload={"true_level": a.esi, "tier": config.tier_for(None, a.esi)},
        ))
    return requests


def outcomes_of(done: Sequence[Request]) -> list[RequestOutcome]:
    """What each finished request got, against its true level's targets, in arrival order."""
    def outcome(r: Request) -> RequestOutcome:
        ttft_target_s, e2e_target_s = slo_targets(r.payload["tier"])
        return RequestOutcome(
            esi=r.payload["true_level"], arrival_s=r.arrival_s, first_token_s=r.first_token_s, finish_s=r.finish_s,
            output_tokens=r.generated_tokens, preemptions=r.preemptions,
            ttft_target_s=ttft_target_s, e2e_target_s=e2e_target_s, tpot_target_s=r.payload["tier"].tpot_target_s,
        )

    return sorted((outcome(r) for r in done), key=lambda o: (o.arrival_s, o.esi, o.finish_s))


def _acceptance(requests: Sequence[Request]) -> float | None:
    drafted = sum(r.drafted_tokens for r in requests)
    return round(sum(r.accepted_tokens for r in requests) / drafted, 4) if drafted else None


def _triage_p50(requests: Sequence[Request]) -> dict[str, float | None]:
    waits: dict[str, list[float]] = {str(level): [] for level in ESI_LEVELS}
    for r in requests:
        waits[str(r.payload["true_level"])].append(r.payload["ready_s"] - r.arrival_s)
    return {level: round(percentile(w, 50), 4) if w else None for level, w in waits.items()}


def config_summary(config: SchedulerConfig, cost: CostModel) -> dict[str, Any]:
    return {
        "policy": config.policy, "batch_size": config.batch_size, "kv_capacity_blocks": config.kv_capacity_blocks,
        "block_size": config.block_size, "preempt_on_arrival": config.preempt_on_arrival,
        "limited_preemption_c": config.limited_preemption_c, "aging_enabled": config.aging_enabled,
        "aging_step_s": sorted({t.aging_step_s for t in config.tiers.values()}),
        "eviction": config.eviction, "stage_merge": config.stage_merge,
        "lower_prefill_share": config.lower_prefill_share, "preempt_within_level": config.preempt_within_level,
        "profile": cost.name,
    }
