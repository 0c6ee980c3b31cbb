"""First come, first served: arrival order, no preemption (continuous batching fills free slots)."""

from __future__ import annotations

from scheduler.policies.base import BaseScheduler
from scheduler.request import Request


class FcfsScheduler(BaseScheduler):
    name = "fcfs"
    preemptive = False

    def priority_key(self, r: Request, now_s: float) -> tuple:
        return (r.arrival_s,)
