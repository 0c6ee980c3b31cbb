"""The semantic policy (Hua et al., Algorithms 1-5): key (effective level, predicted remaining seconds).

With bounded aging on, overdue requests of a level go first in arrival order (see aging.py).

Everything else (arrival buffer, schedule heap, top-b stage-aware selection, priority-based eviction,
cache-or-recompute) is the shared machinery of ``base.BaseScheduler``; this class adds the key, bounded aging
and preempt-on-arrival from the configuration.
"""

from __future__ import annotations

from scheduler.config import TierPolicy
from scheduler.policies.aging import effective_level, is_overdue, next_aging_event_s
from scheduler.policies.base import BaseScheduler
from scheduler.request import Request


def semantic_key(level: int, waited_s: float, arrival_s: float, remaining: float, tier: TierPolicy,
                 aging_enabled: bool) -> tuple[int, int, float]:
    """The semantic ordering key, smaller first: (effective level, 1, predicted remaining), or
    (effective level, 0, arrival) once the request is overdue (aging.py). ``remaining`` is in whatever unit
    the executor predicts in (seconds here, tokens in the vLLM plug-in): only its order within a level
    matters. O(1)."""
    aged = effective_level(level, waited_s, tier, aging_enabled)
    if aging_enabled and is_overdue(level, waited_s, tier, aging_enabled):
        return (aged, 0, arrival_s)
    return (aged, 1, remaining)


def semantic_token_key(level: int, accepted_at: float, predicted_tokens: int, generated_tokens: int,
                       tier: TierPolicy, now: float) -> tuple[int, int, float]:
    """``semantic_key`` in tokens, for executors that know no cost model (vLLM): remaining = predicted minus
    generated, arrival in milliseconds; aging is on where the tier has a step. O(1)."""
    remaining = max(0, int(predicted_tokens) - int(generated_tokens))
    return semantic_key(level, now - accepted_at, accepted_at * 1000.0, remaining, tier,
                        aging_enabled=tier.aging_step_s > 0)


class SemanticScheduler(BaseScheduler):
    name = "semantic"
    urgency_aware = True
    stage_aware = True
    running_keys_improve = True  # remaining time only shrinks, aging only improves the level

    @property
    def preemptive(self) -> bool:  # type: ignore[override]
        return self.config.preempt_on_arrival

    def displaces(self, waiting_key: tuple, running_key: tuple) -> bool:
        """With ``preempt_within_level`` off, only a more urgent (effective) level displaces."""
        return self.config.preempt_within_level or waiting_key[0] < running_key[0]

    def effective_level(self, r: Request, now_s: float) -> int:
        return effective_level(r.level, now_s - r.arrival_s, self.tier(r), self.config.aging_enabled)

    def priority_key(self, r: Request, now_s: float) -> tuple:
        """``semantic_key`` with the predicted remaining seconds (the cost model's estimate)."""
        return semantic_key(r.level, now_s - r.arrival_s, r.arrival_s, self.remaining_s(r), self.tier(r),
                            self.config.aging_enabled)

    def advance_key(self, r: Request, key: tuple) -> tuple | None:
        if key[1] == 0 or r.refined_remaining_tokens is not None:
            return key  # overdue: ordered by arrival, unchanged by running
        if r.predicted_output_tokens - r.generated_tokens <= 2:
            return None  # at the predicted-length floor the estimate stops shrinking: recompute
        cost = self.cost
        return (key[0], 1, key[2] - cost.gamma1 * (r.prompt_tokens + r.generated_tokens) - cost.gamma2)

    def next_rekey_s(self, r: Request, now_s: float) -> float | None:
        return next_aging_event_s(r.level, r.arrival_s, now_s, self.tier(r), self.config.aging_enabled)
