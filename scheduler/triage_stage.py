"""The predictor stage in front of the LLM queue: a call waits to be classified before the scheduler knows its
level, and under a burst that wait is most of an ESI-1 call's time to first token.

A batch of n calls costs ``per_batch_s + n * per_call_s`` on one classifier worker (a linear fit of the triage
predictor's measured batch times: ``python -m tools.classifier_cost``). Three ways to form batches:

- ``immediate``: a free worker takes whatever is waiting, up to ``batch_max``, at once;
- ``full``: it waits until ``batch_max`` calls wait (or the last call of the trace has arrived);
- ``linger``: it takes the first waiting call and lingers up to ``linger_s`` while the batch grows, stopping
  early when it is full: the live Celery task (``triage/services/batching.py``, ``micro_batch_wait_ms``).

``urgent_first``: of the waiting calls a worker takes the most urgent first (the live pre-screen orders the
backlog so; here the predicted level stands in for the screen's score), else the oldest.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

BATCHING_MODES = ("immediate", "full", "linger")


@dataclass(frozen=True)
class ClassifierCost:
    per_batch_s: float
    per_call_s: float

    def batch_s(self, n: int) -> float:
        return self.per_batch_s + n * self.per_call_s

    @classmethod
    def parse(cls, text: str) -> ClassifierCost:
        """"A,B": per batch and per call, in milliseconds."""
        a, b = (float(x) / 1000.0 for x in text.split(","))
        return cls(a, b)


@dataclass(frozen=True)
class TriageStage:
    """The simulator's predictor stage (``python -m scheduler.simulate --triage-stage MODE``)."""

    mode: str
    cost: ClassifierCost
    batch_max: int = 32
    linger_s: float = 0.05
    workers: int = 1
    urgent_first: bool = True

    def triaged_at(self, arrivals_s: Sequence[float], levels: Sequence[int]) -> list[float]:
        return triaged_at(arrivals_s, levels, self.cost, mode=self.mode, batch_max=self.batch_max,
                          linger_s=self.linger_s, workers=self.workers, urgent_first=self.urgent_first)


def triaged_at(arrivals_s: Sequence[float], levels: Sequence[int], cost: ClassifierCost, *, mode: str,
               batch_max: int, linger_s: float = 0.05, workers: int = 1, urgent_first: bool = True) -> list[float]:
    """When each call (by index) leaves the classifier. Deterministic; O(n log n + batches x batch_max log n)."""
    if mode not in BATCHING_MODES:
        raise ValueError(f"mode must be one of {BATCHING_MODES}")
    order = sorted(range(len(arrivals_s)), key=lambda i: (arrivals_s[i], i))
    done = [0.0] * len(arrivals_s)
    free = [0.0] * max(1, workers)  # when each worker is next free (a heap)
    waiting: list[tuple] = []  # (key, index) of arrived, unclassified calls
    nxt = 0  # the next call of ``order`` not yet arrived in ``waiting``

    def admit(until_s: float) -> None:
        nonlocal nxt
        while nxt < len(order) and arrivals_s[order[nxt]] <= until_s:
            i = order[nxt]
            heapq.heappush(waiting, ((levels[i], arrivals_s[i], i) if urgent_first else (arrivals_s[i], i), i))
            nxt += 1

    def arrival_of(k: int, past_the_end: float) -> float:
        """When the k-th call from now (counting those waiting) will have arrived; ``past_the_end`` if the trace
        has fewer calls left."""
        ahead = k - len(waiting)
        if ahead <= 0:
            return 0.0
        return arrivals_s[order[nxt + ahead - 1]] if nxt + ahead - 1 < len(order) else past_the_end

    while nxt < len(order) or waiting:
        t = heapq.heappop(free)
        if not waiting:
            t = max(t, arrivals_s[order[nxt]])
        admit(t)
        if mode == "full":  # the trace's last call flushes what is left (else it would wait for ever)
            t = max(t, arrival_of(batch_max, arrivals_s[order[-1]]))
        elif mode == "linger":  # a live worker does not know no more calls are coming: it lingers
            t = max(t, min(t + linger_s, arrival_of(batch_max, float("inf"))))
        admit(t)
        batch = [heapq.heappop(waiting)[1] for _ in range(min(batch_max, len(waiting)))]
        finish = t + cost.batch_s(len(batch))
        for i in batch:
            done[i] = finish
        heapq.heappush(free, finish)
    return done
