"""LAPS-SD-style least attained service (Li, Chen, Li): multilevel queues by tokens already generated.

A request is *non-perceptible* until it has produced ``PERCEPTIBLE_AFTER_TOKENS`` (its length is not yet
trusted): it competes by attained service alone (least first, FIFO within a queue). Once perceptible it is
ordered shortest-predicted-remaining-first inside its queue. Preemptive and urgency-blind. A running
request's key worsens as it runs, so there is no fast path: each decision re-keys the running batch, O(b).
"""

from __future__ import annotations

import bisect

from scheduler.policies.base import BaseScheduler
from scheduler.request import Request

QUEUE_BOUNDARIES_TOKENS = (16, 64, 256)
PERCEPTIBLE_AFTER_TOKENS = 16


class LapsScheduler(BaseScheduler):
    name = "laps"
    preemptive = True
    running_keys_improve = False

    def priority_key(self, r: Request, now_s: float) -> tuple:
        queue = bisect.bisect_right(QUEUE_BOUNDARIES_TOKENS, r.generated_tokens)
        if r.generated_tokens < PERCEPTIBLE_AFTER_TOKENS:
            return (queue, 0, r.arrival_s)
        return (queue, 1, r.predicted_remaining_tokens)
