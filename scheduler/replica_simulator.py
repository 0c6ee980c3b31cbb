"""Several replicas behind one router, simulated: the live vLLM pool's routing over engines whose model is the
cost model (``scheduler.simulator``'s loop, one per replica, on one virtual clock).

    each event (an arrival, or the end of a replica's iteration), in time order:
        the replicas whose iteration ends now complete it (tokens, finished calls)
        arrivals join the global queue
        the router hands waiting calls, most urgent first, to replicas (scheduler.routing.route), as the pool
        does: a replica is offered while it has a free slot and few calls still awaiting their first token
        each idle replica with work schedules its next iteration (its own semantic policy displaces there)

A replica is one ``scheduler.policies`` scheduler with the configuration's batch and KV capacity (set
``--eviction recompute`` and ``--no-preempt-within-level`` for vLLM's behaviour); the router sees what the
live pool sees: each held call's key, predicted remaining tokens and waiting time, and the replica's decode
step at its current batch. Deterministic: the same arguments give the same result. O(events x R k log k).
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.config import SchedulerConfig
from scheduler.cost import CostModel
from scheduler.decision import Decision
from scheduler.metrics import TdgAccumulator, count_token
from scheduler.policies import BaseScheduler, make_scheduler
from scheduler.policies.displacement import more_urgent_level, never_displaces
from scheduler.replica_state import ReplicaState, RoutedCall, routed_call
from scheduler.request import Request
from scheduler.routing import RoutingRule, assign
from scheduler.simulator import (
    SimResult,
    build_requests,
    complete,
    config_summary,
    iteration_s,
    outcomes_of,
)
from scheduler.workloads import Arrival, Prediction

PREFILL_PROBE_TOKENS = 256  # the prompt length at which a replica's prefill cost per token is quoted


def simulate_replicas(
    config: SchedulerConfig, cost: CostModel, arrivals: Sequence[Arrival], predictions: Sequence[Prediction],
    *, replicas: int = 2, rule: RoutingRule | None = None, max_unstarted: int = 4, uncertainty_rule: bool = True,
    replica_costs: Sequence[CostModel] = (),
) -> SimResult:
    """Run the workload over ``replicas`` engines of ``config`` behind ``rule``; deterministic.
    ``replica_costs``: a cost model per replica (a mixed fleet, e.g. two GPU models); default ``cost`` for all."""
    if replicas < 1:
        raise ValueError("replicas must be >= 1")
    if replica_costs and len(replica_costs) != replicas:
        raise ValueError("replica_costs must name one cost model per replica")
    rule = rule or RoutingRule()
    requests = build_requests(config, arrivals, predictions, uncertainty_rule)
    costs = {f"replica-{i + 1}": (replica_costs[i] if replica_costs else cost) for i in range(replicas)}
    engines = {name: make_scheduler(config, c) for name, c in costs.items()}
    routed = dict.fromkeys(engines, 0)
    busy: dict[str, tuple[Decision, float]] = {}
    waiting: list[Request] = []
    done: list[Request] = []
    tdg = TdgAccumulator()
    displaces = more_urgent_level if config.preempt_on_arrival else never_displaces
    clock = requests[0].arrival_s if requests else 0.0
    nxt = iterations = generated = 0
    preemptions = recomputed = swapped = peak = 0

    def call_of(r: Request, now: float) -> RoutedCall:
        return routed_call(config.tier_for(r.tier, r.level), level=r.level, accepted_at=r.arrival_s,
                           predicted_tokens=r.predicted_output_tokens, generated_tokens=r.generated_tokens,
                           prompt_tokens=r.prompt_tokens, now=now)

    def on_token(r: Request, index: int, t_s: float) -> None:
        count_token(tdg, r.payload["tier"], index=index, t_s=t_s, arrival_s=r.arrival_s)

    def state_of(name: str, engine: BaseScheduler, now: float) -> ReplicaState:
        cost = costs[name]
        held = list(engine.requests.values()) + list(engine.arrival_buffer)
        started = sum(1 for r in held if r.generated_tokens)
        running = [r for r in held if r.generated_tokens and r.kv_tokens_on_device]
        step = cost.decode_step_s(sum(r.prompt_tokens + r.generated_tokens for r in running))
        return ReplicaState(name, min(config.batch_size, started + max_unstarted), [call_of(r, now) for r in held],
                            step_s=step + cost.iteration_overhead_s,
                            prefill_s_per_token=cost.prefill_s(PREFILL_PROBE_TOKENS) / PREFILL_PROBE_TOKENS,
                            slots=config.batch_size)

    while nxt < len(requests) or waiting or busy or any(e.has_work() for e in engines.values()):
        for name, (decision, end) in sorted(busy.items()):
            if end <= clock:
                del busy[name]
                done.extend(complete(engines[name], decision, end, on_token))
        while nxt < len(requests) and requests[nxt].arrival_s <= clock:
            waiting.append(requests[nxt])
            nxt += 1
        if waiting:
            states = {name: state_of(name, e, clock) for name, e in engines.items()}
            by_id = {r.id: r for r in waiting}  # in arrival order: ties of key go to the earlier call
            for call_id, replica in assign({i: call_of(r, clock) for i, r in by_id.items()}, states, displaces, rule):
                engines[replica].submit(by_id[call_id])
                waiting.remove(by_id[call_id])
                routed[replica] += 1
        for name, engine in engines.items():
            if name in busy or not engine.has_work():
                continue
            decision = engine.schedule(clock)
            done.extend(decision.cancelled)
            if not decision.is_idle:
                busy[name] = (decision, clock + iteration_s(decision, costs[name]))
                iterations += 1
                generated += len(decision.batch)
        upcoming = [end for _, end in busy.values()] + ([requests[nxt].arrival_s] if nxt < len(requests) else [])
        if not upcoming:
            if waiting or any(e.requests for e in engines.values()):
                raise RuntimeError("deadlock: calls are held but no replica can run them")
            break
        clock = max(clock, min(upcoming))
    for engine in engines.values():
        preemptions += engine.preemptions
        recomputed += engine.recomputed_tokens
        swapped += engine.swapped_tokens
        peak = max(peak, engine.memory.peak_blocks)
    start = requests[0].arrival_s if requests else 0.0
    summary = dict(config_summary(config, cost), replicas=replicas, routing=rule.name,
                   replica_profiles=[c.name for c in costs.values()],
                   reserve_slots=rule.reserve_slots, max_unstarted=max_unstarted)
    return SimResult(
        policy=f"{config.policy}/{rule.name}", config=summary, outcomes=outcomes_of(done),
        preemptions=preemptions, swapped_tokens=swapped, recomputed_tokens=recomputed, peak_kv_blocks=peak,
        makespan_s=clock - start, generated_tokens=generated, tdg_ratio=tdg.ratio, iterations=iterations,
        extra={"routed_per_replica": routed},
    )
