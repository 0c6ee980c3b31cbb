"""LAPS-SD (Li, Chen, Li, "Semi-Clairvoyant Scheduling of Speculative Decoding Requests to Minimize LLM Inference
Latency"): least attained service while a request's execution time cannot be estimated, shortest estimated time
once it can.

With speculative decoding a request's execution time depends on its length *and* on how many draft tokens the
model accepts. Until its acceptance rate is stable a request is **non-perceptible**: it sits in a multilevel queue
by attained service (tokens generated, ``QUEUE_BOUNDARIES_TOKENS``), least attained first, FIFO within a queue,
preemptive across queues. The rate is stable once the running estimate (accepted / drafted so far, kept per round
on the request) has varied by at most ``STABILITY_DELTA`` over the last ``STABILITY_ROUNDS`` rounds (the paper's
δ and γ). The request is then **perceptible**: its remaining time is the paper's estimate

    T = L * (n * T_SSM + T_LLM) / (n * A + 1)

with L the predicted remaining tokens, n A + 1 the tokens a round emits (measured directly: 1 + accepted per
round), T_SSM = 0 (our drafts come from prompt lookup and the read-out, not a draft model) and T_LLM one decode
step by the cost model. Perceptible requests run first, shortest estimated time first; their estimate is the
one that can be trusted.

Without speculative decoding no acceptance rate is observed: every request stays non-perceptible and the policy is
least attained service. Urgency-blind; a running request's key changes as it runs, so there is no fast path.
"""

from __future__ import annotations

import bisect

from scheduler.policies.base import BaseScheduler
from scheduler.request import ACCEPTANCE_TRACE_ROUNDS, Request

QUEUE_BOUNDARIES_TOKENS = (16, 64, 256)
STABILITY_ROUNDS = 4  # gamma: rounds over which the estimate must hold still
STABILITY_DELTA = 0.05  # delta: how far it may move in them
assert STABILITY_ROUNDS <= ACCEPTANCE_TRACE_ROUNDS


def acceptance_stable(r: Request, rounds: int = STABILITY_ROUNDS, delta: float = STABILITY_DELTA) -> bool:
    """LAPS-SD's stability test: ``rounds`` acceptance estimates so far, the last ``rounds`` within ``delta``."""
    trace = r.acceptance_trace
    if len(trace) < rounds:
        return False
    recent = list(trace)[-rounds:]
    return max(recent) - min(recent) <= delta


class LapsScheduler(BaseScheduler):
    name = "laps"
    preemptive = True
    running_keys_improve = False

    def estimated_remaining_s(self, r: Request) -> float:
        """The paper's T for a perceptible request: its remaining tokens in rounds of 1 + accepted tokens each."""
        tokens_per_round = 1.0 + r.accepted_tokens / max(1, r.draft_rounds)
        return self.remaining_s(r, remaining_tokens=r.predicted_remaining_tokens / tokens_per_round)

    def priority_key(self, r: Request, now_s: float) -> tuple:
        if acceptance_stable(r):
            return (0, self.estimated_remaining_s(r))
        queue = bisect.bisect_right(QUEUE_BOUNDARIES_TOKENS, r.generated_tokens)
        return (1, queue, r.arrival_s)
