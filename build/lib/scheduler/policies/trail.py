"""TRAIL (Shahout et al., "Don't Stop Me Now"): shortest predicted remaining processing time, preemptive,
with limited preemption: a request that has produced C x its predicted length is no longer displaced
(C = ``limited_preemption_c``, else ``trail_default_c`` = 0.8, their best). Uses the refined remaining
length when the length probe supplies one (``refine_remaining``). Urgency-blind."""

from __future__ import annotations

from scheduler.policies.base import BaseScheduler
from scheduler.request import Request


class TrailScheduler(BaseScheduler):
    name = "trail"
    preemptive = True
    running_keys_improve = True

    @property
    def limited_preemption_c(self) -> float | None:
        c = self.config.limited_preemption_c
        return self.config.trail_default_c if c is None else c

    def priority_key(self, r: Request, now_s: float) -> tuple:
        return (r.predicted_remaining_tokens,)
