"""Speculative decoding in the simulator: how many tokens a decoding request's step emits, and what verifying its
drafts costs.

A decoding request drafts ``tokens`` tokens each step; the model keeps the longest prefix of the draft that
agrees with its own greedy choice and adds its own token after it (``inference.model_runner``). Here each draft
token agrees with the request's own probability ``p`` until the first that does not, so a step emits
``1 + accepted`` tokens, ``p (1 - p^k) / (1 - p)`` accepted on average with k drafts. ``p`` is drawn per request
at arrival, uniformly in ``[low, high]``: the spread of acceptance across calls. Its running estimate
(accepted / drafted) is noisy over the first rounds and settles as they accumulate, the dynamic the LAPS-SD
paper schedules around.

Verifying k drafts puts k more tokens through the weights in the step: ``alpha2`` seconds each by the cost model
(the linear, per-token term of a prefill), on top of the decode step.

Our engine's measured acceptance (docs/decisions/speculative-decoding.md): 1.000 with the read-out's forced
tokens, 0.90-0.95 with prompt lookup alone.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from scheduler.cost import CostModel
from scheduler.request import Request

ACCEPTANCE_KEY = "draft_acceptance_p"  # a request's acceptance probability, in its payload


@dataclass(frozen=True)
class DraftProfile:
    tokens: int  # drafts per decoding request and step
    low: float = 1.0  # per-token acceptance probability of a request: uniform in [low, high]
    high: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.tokens < 1 or not 0.0 <= self.low <= self.high <= 1.0:
            raise ValueError("a draft profile needs tokens >= 1 and 0 <= low <= high <= 1")

    @classmethod
    def parse(cls, tokens: int, acceptance: str, seed: int = 0) -> DraftProfile:
        """``acceptance``: ``P`` or ``LOW,HIGH``."""
        low, _, high = acceptance.partition(",")
        return cls(tokens, float(low), float(high or low), seed)

    def assign(self, requests: Iterable[Request]) -> None:
        """Draw each request's acceptance probability, in the given (arrival) order; deterministic per seed."""
        rng = random.Random(self.seed)
        for r in requests:
            r.payload[ACCEPTANCE_KEY] = rng.uniform(self.low, self.high)

    def drafts(self, batch: Iterable[Request]) -> dict[str, int]:
        """The members that decode this step (prefills do not draft), with their draft lengths."""
        return {r.id: self.tokens for r in batch if not r.needs_prefill}

    def verify_s(self, cost: CostModel, drafts: Mapping[str, int]) -> float:
        return cost.alpha2 * sum(drafts.values())

    def verify(self, batch: Iterable[Request], drafts: Mapping[str, int], rng: random.Random) -> dict[str, int]:
        """Accepted draft tokens per drafting member, each reported to its request (``record_draft_round``)."""
        accepted = {}
        for r in batch:
            k = drafts.get(r.id, 0)
            if not k:
                continue
            p = r.payload[ACCEPTANCE_KEY]
            n = 0
            while n < k and rng.random() < p:
                n += 1
            r.record_draft_round(k, n)
            accepted[r.id] = n
        return accepted
