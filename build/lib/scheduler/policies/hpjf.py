"""Highest priority job first: the level, FIFO within a level. Preempts on arrival when the configuration
says so, exactly like the semantic policy, so the comparison isolates the remaining-time key and stage
awareness."""

from __future__ import annotations

from scheduler.policies.base import BaseScheduler
from scheduler.request import Request


class HpjfScheduler(BaseScheduler):
    name = "hpjf"
    urgency_aware = True

    @property
    def preemptive(self) -> bool:  # type: ignore[override]
        return self.config.preempt_on_arrival

    def priority_key(self, r: Request, now_s: float) -> tuple:
        return (r.level, r.arrival_s)
