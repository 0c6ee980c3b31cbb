"""Shortest job first on the predicted output length; urgency-blind, no preemption."""

from __future__ import annotations

from scheduler.policies.base import BaseScheduler
from scheduler.request import Request


class SjfScheduler(BaseScheduler):
    name = "sjf"
    preemptive = False

    def priority_key(self, r: Request, now_s: float) -> tuple:
        return (r.predicted_output_tokens, r.arrival_s)
