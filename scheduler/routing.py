"""Routing over several engine replicas that each run the semantic policy (vLLM servers with our plug-in).

The worker keeps one global queue in semantic-key order and hands each call, most urgent first, to a replica
by one of two rules (``ROUTING_RULES``; docs/decisions/vllm-semantic-scheduler.md says which is the default
and why):

- ``soonest-start``: where it starts soonest. A replica where it starts *now* (a free slot, or a running call
  it displaces there) wins over one where it would queue; among those, a free slot wins over a displacement
  (nobody pays a recompute), and a displacement takes the least urgent victim on offer.
- ``gorouting``: PROSERVE's GoRouting (``scheduler.gorouting``): where its expected TDG gain, less the loss of
  any call it displaces, is highest, keeping ``reserve_slots`` free for urgent calls to come.

Under both, a call may only go where it starts now or, with room ahead (``queue_ahead``: keeps the replica's
batch fed between the worker's passes), queues; otherwise it stays in the global queue, where it keeps its
place for whichever replica frees first. An ESI-1 call never waits while any replica runs less urgent work
it could displace. All functions are pure; ``route`` is O(R k log k) for R replicas holding k calls each.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from scheduler.gorouting import displacement_loss, gain_on, start_delay_s
from scheduler.policies.displacement import Key, more_urgent_level
from scheduler.replica_state import ReplicaState, RoutedCall

SOONEST_START = "soonest-start"
GOROUTING = "gorouting"
ROUTING_RULES = (SOONEST_START, GOROUTING)
DEFAULT_ROUTING = SOONEST_START


@dataclass(frozen=True)
class RoutingRule:
    name: str = DEFAULT_ROUTING
    # GoRouting: free slots across the pool that only calls of ``urgent_level`` or better may take
    reserve_slots: int = 1
    urgent_level: int = 2
    # Pack short routine calls onto the busiest replica that takes them (keeping whole replicas free for urgent
    # and long calls), rather than spread every call to the most free slots
    pack: bool = False
    long_tokens: int = 256  # a call predicted to generate at least this many is "long": it spreads, never packs

    def __post_init__(self) -> None:
        if self.name not in ROUTING_RULES:
            raise ValueError(f"routing rule must be one of {ROUTING_RULES}, not {self.name!r}")
        if self.reserve_slots < 0:
            raise ValueError("reserve_slots must be >= 0")


@dataclass(frozen=True)
class Placement:
    replica: str
    starts_now: bool
    displaces: Key | None = None  # the running call's key it takes the slot of, if any


def placement_on(key: Key, replica: ReplicaState,
                 displaces: Callable[[Key, Key], bool] = more_urgent_level) -> Placement | None:
    """Whether (and how) a call with ``key`` starts on ``replica`` now, or queues there; None: no room."""
    if not replica.up:
        return None
    held = sorted(replica.keys)
    ahead = sum(1 for k in held if k <= key)
    if len(held) < replica.capacity:
        return Placement(replica.name, starts_now=True)
    worst = held[replica.capacity - 1]  # the replica runs its best calls (its own policy is ours)
    if ahead < replica.capacity and key < worst and displaces(key, worst):
        return Placement(replica.name, starts_now=True, displaces=worst)
    if len(held) < replica.capacity + replica.queue_ahead:
        return Placement(replica.name, starts_now=False)
    return None


def route(call: RoutedCall, replicas: Sequence[ReplicaState],
          displaces: Callable[[Key, Key], bool] = more_urgent_level,
          rule: RoutingRule = RoutingRule()) -> Placement | None:
    """The replica ``rule`` sends ``call`` to, or None to keep it in the global queue."""
    pool_free = sum(r.free_slots for r in replicas)
    best: tuple | None = None
    chosen: Placement | None = None
    for replica in replicas:
        placement = placement_on(call.key, replica, displaces)
        if placement is None:
            continue
        if rule.name == GOROUTING:
            rank = _gorouting_rank(call, replica, placement, pool_free, rule)
            if rank is None:
                continue
        else:
            rank = _soonest_start_rank(call.key, replica, placement)
        if best is None or rank < best:
            best, chosen = rank, placement
    return chosen


def assign(calls: Mapping[str, RoutedCall], replicas: Mapping[str, ReplicaState],
           displaces: Callable[[Key, Key], bool] = more_urgent_level,
           rule: RoutingRule = RoutingRule()) -> list[tuple[str, str]]:
    """(call id, replica) for the waiting ``calls``, most urgent first (ties in the mapping's order), each where
    ``rule`` sends it, until one must stay in the global queue: nothing less urgent may go ahead of it. Each
    assigned call is added to its replica's state, so the next one sees it there."""
    assigned = []
    for call_id in sorted(calls, key=lambda call_id: calls[call_id].key):
        placement = route(calls[call_id], list(replicas.values()), displaces, rule)
        if placement is None:
            break
        replicas[placement.replica].calls.append(calls[call_id])
        assigned.append((call_id, placement.replica))
    return assigned


def _soonest_start_rank(key: Key, replica: ReplicaState, placement: Placement) -> tuple:
    if placement.starts_now and placement.displaces is None:
        return (0, len(replica.calls), replica.name)
    if placement.starts_now:
        # the least urgent victim: negate its key's parts so that min() picks the worst key
        return (1, tuple(-part for part in placement.displaces), replica.name)
    ahead = sum(1 for k in replica.keys if k <= key)
    return (2, ahead, len(replica.calls), replica.name)


def _gorouting_rank(call: RoutedCall, replica: ReplicaState, placement: Placement, pool_free: int,
                    rule: RoutingRule) -> tuple | None:
    urgent = call.level <= rule.urgent_level
    if not urgent and 0 < pool_free <= rule.reserve_slots:
        # The pool's last free slots are kept for urgent calls to come; a routine call neither takes one nor
        # displaces anyone while one is free (a recompute the free slot shows is not needed): it waits.
        return None
    delay = 0.0 if placement.starts_now else start_delay_s(call, replica)
    net = gain_on(call, replica, delay)
    if placement.displaces is not None:
        net -= displacement_loss(max(replica.running(), key=lambda c: c.key), replica)
    pack = rule.pack and not urgent and call.remaining_tokens < rule.long_tokens
    fit = replica.free_slots if pack else -replica.free_slots
    least_urgent_victim = () if placement.displaces is None else tuple(-part for part in placement.displaces)
    # max gain first (rounded: equal estimates tie), then displacing nobody or else the least urgent victim,
    # then starting now, then fit, then the name
    return (-round(net, 6), placement.displaces is not None, least_urgent_victim, not placement.starts_now, fit,
            replica.name)
