"""Routing over several engine replicas that each run the semantic policy (vLLM servers with our plug-in).

The worker keeps one global queue in semantic-key order and hands a call to a replica only where it starts
soonest, after PROSERVE's GoRouting (docs/architecture.md): a replica where it starts *now* (a free slot, or a running
call it displaces there) wins over one where it would queue; among those, a free slot wins over a
displacement (nobody pays a recompute), and a displacement takes the least urgent victim on offer. A call that
starts nowhere now may still queue on a replica with room ahead (``queue_ahead``: keeps the replica's batch fed
between the worker's passes), where the fewest calls are ahead of it; otherwise it stays in the global queue,
where it keeps its place for whichever replica frees first.

So an ESI-1 call never waits while any replica runs less urgent work it could displace. All functions are
pure; ``route`` is O(R k log k) for R replicas holding k calls each.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from scheduler.policies.displacement import Key, more_urgent_level


@dataclass
class ReplicaState:
    """What the router knows of one replica: the keys of the calls it holds (running or queued there)."""

    name: str
    capacity: int  # calls it runs at once (vLLM's max_num_seqs)
    keys: list[Key] = field(default_factory=list)
    queue_ahead: int = 0  # calls it may hold beyond its capacity
    up: bool = True


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
    running = held[:replica.capacity]  # the replica runs its best calls (its own policy is ours)
    worst = running[-1]
    if ahead < replica.capacity and key < worst and displaces(key, worst):
        return Placement(replica.name, starts_now=True, displaces=worst)
    if len(held) < replica.capacity + replica.queue_ahead:
        return Placement(replica.name, starts_now=False)
    return None


def route(key: Key, replicas: Sequence[ReplicaState],
          displaces: Callable[[Key, Key], bool] = more_urgent_level) -> Placement | None:
    """The replica where a call with ``key`` starts soonest, or None to keep it in the global queue."""
    best: tuple | None = None
    chosen: Placement | None = None
    for replica in replicas:
        placement = placement_on(key, replica, displaces)
        if placement is None:
            continue
        ahead = sum(1 for k in replica.keys if k <= key)
        if placement.starts_now and placement.displaces is None:
            rank = (0, len(replica.keys), replica.name)
        elif placement.starts_now:
            # the least urgent victim: negate its key's parts so that min() picks the worst key
            rank = (1, tuple(-part for part in placement.displaces), replica.name)
        else:
            rank = (2, ahead, len(replica.keys), replica.name)
        if best is None or rank < best:
            best, chosen = rank, placement
    return chosen
