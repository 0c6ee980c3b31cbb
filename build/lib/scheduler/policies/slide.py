"""PROSERVE SlideBatching (Huang et al.), adapted to one engine: a sliding boundary splits requests into
urgent ones, served deadline-first, and normal ones, served density-first.

Each request's next token is due at ``arrival + TTFT target + generated * TPOT target`` (its tier's targets).
The boundary is the latency budget of one iteration from the batch latency estimator (the cost model):
a request is urgent once its slack (deadline - now) falls below ``URGENT_BUDGET_ITERATIONS`` iterations of
the full batch. Normal requests go in order of density, tier weight per predicted remaining second.
Becoming urgent is a time event (``next_rekey_s``), so waiting requests move between classes in O(log n).
"""

from __future__ import annotations

from scheduler.policies.base import BaseScheduler
from scheduler.request import Request

URGENT_BUDGET_ITERATIONS = 20


class SlideScheduler(BaseScheduler):
    name = "slide"
    urgency_aware = True
    preemptive = True
    running_keys_improve = False

    def deadline_s(self, r: Request) -> float:
        tier = self.tier(r)
        return r.arrival_s + tier.ttft_target_mean_s + r.generated_tokens * tier.tpot_target_s

    def boundary_s(self) -> float:
        b = self.config.batch_size
        step = self.cost.decode_step_s(b * 512) + self.cost.iteration_overhead_s
        return URGENT_BUDGET_ITERATIONS * step

    def priority_key(self, r: Request, now_s: float) -> tuple:
        deadline = self.deadline_s(r)
        if deadline - now_s <= self.boundary_s():
            return (0, deadline)
        density = self.tier(r).tdg_weight / max(self.remaining_s(r), 1e-9)
        return (1, -density)

    def next_rekey_s(self, r: Request, now_s: float) -> float | None:
        t = self.deadline_s(r) - self.boundary_s()
        return t if t > now_s else None
