"""GoRouting's gain estimate (Huang et al., PROSERVE, section 4.3): what a call is worth on each replica.

PROSERVE scores service by token-level deadline gain (TDG, ``scheduler.metrics``): token i of a call is due
at acceptance + TTFT target + (i - 1) x TPOT target, and each token delivered by its deadline earns the tier's
weight (the first token ``FIRST_TOKEN_WEIGHT`` times that). GoRouting sends a call where it earns the most:

- **gain** of the call on a replica: the weighted tokens it would deliver on time if it started there, from
  when it would start (now on a free slot or by displacement; after the slot releases ahead of it in that
  replica's queue otherwise), its prefill, and the replica's decode step time (a busy replica is slower);
- **minus the loss** it causes there: a displaced call pauses until a slot frees and must recompute its
  context, and the tokens that pause makes late are lost gain (vLLM's preemption is a recompute);
- **capability-aware**: a call of low priority does not take the pool's last ``reserve_slots`` free slots
  (PROSERVE keeps capacity for high-priority calls to come, which then start without displacing anyone);
  among replicas of equal gain a call goes where most slots are free, or, with ``pack``, a short routine
  call packs onto the busiest replica that takes it, keeping whole capacity free for urgent and long calls.

The paper's constants (its Tables 1-2) were not available to us; the reservation and the long-call threshold
are parameters of ``scheduler.routing.RoutingRule``, compared in the simulator (BENCHMARKS.md).
All functions are pure; a replica holding k calls costs O(k log k).
"""

from __future__ import annotations

import heapq
import math

from scheduler.metrics import FIRST_TOKEN_WEIGHT
from scheduler.replica_state import ReplicaState, RoutedCall

_EPS = 1e-9  # a token due exactly when it comes is on time, whatever the float rounding of the division


def weighted_tokens_on_time(call: RoutedCall, first_at_s: float, step_s: float) -> float:
    """The TDG the call earns from its next token on, if that token comes ``first_at_s`` after its acceptance
    and each further one ``step_s`` later; O(1).

    Token ``f + j`` is on time iff ``first_at + j*step <= T + (f + j - 1)*TPOT``, i.e. ``s <= j*(TPOT - step)``
    with ``s`` the lateness of the next token against its own deadline: a late start is caught up where the
    replica is faster than the TPOT target, and a faster-than-target replica never falls behind."""
    count = max(1, call.remaining_tokens)
    first = call.generated_tokens + 1
    tpot = call.tpot_target_s
    if math.isinf(tpot):
        first_on_time = first > 1 or first_at_s <= call.ttft_target_s
        on_time = count - (0 if first_on_time else 1)
    else:
        lateness = first_at_s - call.ttft_target_s - (first - 1) * tpot
        slack_per_token = tpot - step_s
        if slack_per_token > 0:
            late = min(count, max(0, math.ceil(lateness / slack_per_token - _EPS))) if lateness > 0 else 0
            first_on_time, on_time = late == 0, count - late
        elif lateness > 0:
            first_on_time, on_time = False, 0
        else:
            first_on_time = True
            on_time = count if slack_per_token == 0 else min(count, math.floor(lateness / slack_per_token + _EPS) + 1)
    bonus = FIRST_TOKEN_WEIGHT - 1.0 if first == 1 and first_on_time else 0.0
    return call.weight * (on_time + bonus)


def start_delay_s(call: RoutedCall, replica: ReplicaState) -> float:
    """Seconds until a slot frees for ``call`` queued on ``replica``: its running calls release slots as they
    finish (predicted remaining tokens x step time), and each call queued ahead of it takes the next slot
    first; 0 where a slot is free. O(k log k)."""
    held = sorted(replica.calls, key=lambda c: c.key)
    if len(held) < replica.capacity:
        return 0.0
    running, queued = held[:replica.capacity], held[replica.capacity:]
    releases = [c.remaining_tokens * replica.step_s for c in running]
    heapq.heapify(releases)
    for q in queued:
        if q.key > call.key:
            break
        t = heapq.heappop(releases)
        heapq.heappush(releases, t + prefill_s(q, replica) + q.remaining_tokens * replica.step_s)
    return releases[0]


def prefill_s(call: RoutedCall, replica: ReplicaState) -> float:
    return (call.prompt_tokens + call.generated_tokens) * replica.prefill_s_per_token


def gain_on(call: RoutedCall, replica: ReplicaState, delay_s: float) -> float:
    """The call's TDG on ``replica`` if it starts after ``delay_s``."""
    first_at = call.waited_s + delay_s + prefill_s(call, replica) + replica.step_s
    return weighted_tokens_on_time(call, first_at, replica.step_s)


def displacement_loss(victim: RoutedCall, replica: ReplicaState) -> float:
    """The TDG a running call loses when displaced on ``replica``: it pauses until the first of the others
    frees a slot, then recomputes its prompt and what it generated (vLLM drops a victim's KV)."""
    others = [c for c in replica.running() if c is not victim]
    pause = min((c.remaining_tokens * replica.step_s for c in others), default=0.0)
    unpaused = weighted_tokens_on_time(victim, victim.waited_s + replica.step_s, replica.step_s)
    paused_first = victim.waited_s + pause + prefill_s(victim, replica) + replica.step_s
    return max(0.0, unpaused - weighted_tokens_on_time(victim, paused_first, replica.step_s))
