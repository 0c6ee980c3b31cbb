"""Preempt-on-arrival for engines that run their own batch (vLLM): which running requests give way.

Our own engine decides the whole batch each iteration (``BaseScheduler._select``); an engine with its own
scheduler only needs the displacement rule on top of it: the best waiting requests that do not fit into free
slots each displace the worst running request they beat, as long as the policy lets them
(``displaces``) and the victim may still be preempted (``preemption_allowed``). Among victims of equal key
the one that has computed the fewest tokens goes first: on a recompute-only engine that is the cheapest to
bring back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

Key = tuple


@dataclass(frozen=True)
class RunningCandidate:
    """A running request as the displacement rule sees it."""

    id: str
    key: Key
    preemptible: bool = True
    computed_tokens: int = 0  # what a recompute-only engine must redo to bring it back


def more_urgent_level(waiting_key: Key, running_key: Key) -> bool:
    """Only a more urgent (effective) level displaces: the rule for recompute-only engines, where a
    within-level swap would redo the victim's whole context for a small gain in order."""
    return waiting_key[0] < running_key[0]


def preemption_allowed(preemptions: int, max_preemptions: int, generated_tokens: int = 0,
                       predicted_output_tokens: int = 0, limited_c: float | None = None) -> bool:
    """The tier's preemption cap and TRAIL's limited preemption (a request past ``limited_c`` x its predicted
    length keeps its slot); O(1)."""
    if preemptions >= max_preemptions:
        return False
    return limited_c is None or generated_tokens < limited_c * predicted_output_tokens


def displacement_victims(
    waiting_keys: Sequence[Key],
    running: Sequence[RunningCandidate],
    free_slots: int,
    displaces: Callable[[Key, Key], bool] = more_urgent_level,
) -> list[str]:
    """Ids of the running requests to preempt now, worst first.

    ``waiting_keys`` are the waiting requests' keys, best first; the first ``free_slots`` of them take free
    slots, each later one displaces the worst preemptible running request whose key it beats. Stops at the
    first waiting request that displaces nobody (every later one is no better). O((w + b) log b).
    """
    victims = sorted((r for r in running if r.preemptible), key=lambda r: (r.key, -r.computed_tokens),
                     reverse=True)
    chosen: list[str] = []
    for key in waiting_keys[max(0, free_slots):]:
        if len(chosen) == len(victims):
            break
        victim = victims[len(chosen)]
        if not (key < victim.key and displaces(key, victim.key)):
            break
        chosen.append(victim.id)
    return chosen
