"""Preempt-on-arrival for engines that run their own batch (vLLM): which running requests give way.

Our own engine decides the whole batch each iteration (``BaseScheduler._select``); an engine with its own
scheduler only needs the displacement rule on top of it: the best waiting requests that do not fit into free
slots each displace the worst running request they beat, as long as the policy lets them
(``displaces``) and the victim may still be preempted (``preemption_allowed``). Among victims of equal key
the one that has computed the fewest tokens goes first: on a recompute-only engine that is the cheapest to
bring back.

With the engine's step budget (the tokens one iteration computes), a request displaces only while the step
has tokens left to start it: a slot without compute gains it nothing this step, while the victim's recompute
is certain. Where prefill is the bottleneck (a CPU, long prompts) this keeps preemption from only losing work.
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
    step_tokens: int = 1  # what it takes of a step's budget while it runs: 1 decoding, a prefill's rest


@dataclass(frozen=True)
class WaitingCandidate:
    """A waiting request as the displacement rule sees it, where the engine's step budget counts."""

    key: Key
    step_tokens: int = 1  # tokens to compute before its next output token (its prompt, or a victim's context)


def more_urgent_level(waiting_key: Key, running_key: Key) -> bool:
    """Only a more urgent (effective) level displaces: the rule for recompute-only engines, where a
    within-level swap would redo the victim's whole context for a small gain in order."""
    return waiting_key[0] < running_key[0]


def never_displaces(waiting_key: Key, running_key: Key) -> bool:
    """The rule with preempt-on-arrival off: a waiting request waits for a free slot."""
    return False


def preemption_allowed(preemptions: int, max_preemptions: int, generated_tokens: int = 0,
                       predicted_output_tokens: int = 0, limited_c: float | None = None) -> bool:
    """The tier's preemption cap and TRAIL's limited preemption (a request past ``limited_c`` x its predicted
    length keeps its slot); O(1)."""
    if preemptions >= max_preemptions:
        return False
    return limited_c is None or generated_tokens < limited_c * predicted_output_tokens


def displacement_victims(
    waiting: Sequence[Key | WaitingCandidate],
    running: Sequence[RunningCandidate],
    free_slots: int,
    displaces: Callable[[Key, Key], bool] = more_urgent_level,
    step_budget: int | None = None,
) -> list[str]:
    """Ids of the running requests to preempt now, worst first.

    ``waiting`` are the waiting requests (keys, or candidates with their step tokens), best first; the first
    ``free_slots`` of them take free slots, each later one displaces the worst preemptible running request
    whose key it beats. Stops at the first waiting request that displaces nobody (every later one is no
    better). With ``step_budget``, the running requests that stay and the waiting ones before it take their
    step tokens first, and a request displaces only while some are left to start it. O((w + b) log b).
    """
    candidates = [w if isinstance(w, WaitingCandidate) else WaitingCandidate(w) for w in waiting]
    victims = sorted((r for r in running if r.preemptible), key=lambda r: (r.key, -r.computed_tokens),
                     reverse=True)
    free = max(0, free_slots)
    left = None
    if step_budget is not None:
        left = step_budget - sum(r.step_tokens for r in running) - sum(w.step_tokens for w in candidates[:free])
    chosen: list[str] = []
    for candidate in candidates[free:]:
        if len(chosen) == len(victims):
            break
        victim = victims[len(chosen)]
        if not (candidate.key < victim.key and displaces(candidate.key, victim.key)):
            break
        if left is not None:
            left += victim.step_tokens
            if left <= 0:
                break
            left -= candidate.step_tokens
        chosen.append(victim.id)
    return chosen
