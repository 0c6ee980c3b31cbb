"""The clairvoyant lower bound: true levels and true output lengths, preemptive priority-then-shortest-
remaining, stage-aware like the semantic policy. Needs ``true_output_tokens`` (the simulator sets it) and
reads the true level from ``payload["true_level"]`` when urgency errors are injected."""

from __future__ import annotations

from scheduler.policies.base import BaseScheduler
from scheduler.request import Request


class OracleScheduler(BaseScheduler):
    name = "oracle"
    urgency_aware = True
    stage_aware = True
    preemptive = True
    running_keys_improve = True

    def priority_key(self, r: Request, now_s: float) -> tuple:
        true_total = r.true_output_tokens if r.true_output_tokens is not None else r.predicted_output_tokens
        level = r.payload.get("true_level", r.level)
        return (level, self.remaining_s(r, max(1, true_total - r.generated_tokens)))

    def advance_key(self, r: Request, key: tuple) -> tuple | None:
        true_total = r.true_output_tokens if r.true_output_tokens is not None else r.predicted_output_tokens
        if true_total - r.generated_tokens <= 2:
            return None
        cost = self.cost
        return (key[0], key[1] - cost.gamma1 * (r.prompt_tokens + r.generated_tokens) - cost.gamma2)
