"""What a router knows of the calls it routes and of each replica (a vLLM server running our plug-in, or a
simulated engine): plain values, built by the live pool from its streams and by the simulator from its
schedulers, read by ``scheduler.routing``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.config import TierPolicy
from scheduler.policies.displacement import Key
from scheduler.policies.semantic import semantic_token_key


@dataclass(frozen=True)
class RoutedCall:
    """A call as the router sees it: its semantic key now (the global queue's order) and what the gain
    estimate needs (GoRouting): its predicted work, how long it has waited, its tier's targets and weight."""

    key: Key
    remaining_tokens: int = 1  # predicted tokens still to generate
    prompt_tokens: int = 0  # what a (re)start must prefill: the prompt plus any text generated before
    generated_tokens: int = 0
    waited_s: float = 0.0  # since acceptance: token deadlines count from there
    ttft_target_s: float = float("inf")
    tpot_target_s: float = float("inf")
    weight: float = 1.0  # its tier's TDG weight

    @property
    def level(self) -> int:
        return int(self.key[0])


@dataclass
class ReplicaState:
    """One replica: the calls it holds (running or queued there), how many it runs at once, and its speed."""

    name: str
    capacity: int  # calls it may be given to run now (fewer than its slots while calls await their prefill)
    calls: list[RoutedCall] = field(default_factory=list)
    queue_ahead: int = 0  # calls it may hold beyond its capacity
    up: bool = True
    # Seconds per decode step at its current batch (observed by the pool, the cost model's in the simulator)
    # and per prompt token of a prefill: what GoRouting turns into a start time and a token rate.
    step_s: float = 0.05
    prefill_s_per_token: float = 0.0
    slots: int = 0  # calls it runs at once (vLLM's max_num_seqs); 0: its capacity

    @property
    def keys(self) -> list[Key]:
        return [c.key for c in self.calls]

    def running(self) -> list[RoutedCall]:
        """The calls it runs now: its best ``capacity`` (its own policy is ours)."""
        return sorted(self.calls, key=lambda c: c.key)[:self.capacity]

    @property
    def free_slots(self) -> int:
        """Slots no call holds (the capacity GoRouting keeps for urgent calls to come)."""
        return max(0, (self.slots or self.capacity) - len(self.calls)) if self.up else 0


def routed_call(tier: TierPolicy, *, level: int, accepted_at: float, predicted_tokens: int, now: float,
                generated_tokens: int = 0, prompt_tokens: int = 0) -> RoutedCall:
    """A call as the router sees it at ``now`` (the live pool and the simulator): its semantic key in tokens
    (``semantic_token_key``, aging included), its targets and weight from its tier."""
    key = semantic_token_key(level, accepted_at, predicted_tokens, generated_tokens, tier, now)
    return RoutedCall(key=key, remaining_tokens=max(1, int(predicted_tokens) - int(generated_tokens)),
                      prompt_tokens=prompt_tokens, generated_tokens=generated_tokens, waited_s=now - accepted_at,
                      ttft_target_s=tier.ttft_target_mean_s, tpot_target_s=tier.tpot_target_s,
                      weight=tier.tdg_weight)
