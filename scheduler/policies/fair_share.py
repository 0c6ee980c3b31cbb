"""Fair share across call systems within a level: weighted Virtual Token Counters (VTC; Sheng Y et al.,
"Fairness in Serving Large Language Models", OSDI 2024, Algorithm 2, with per-client weights as in its
weighted variant).

Urgency comes first: a more urgent (effective) level always goes first, whoever sent it. Among the waiting
requests of one level (and one aging state: overdue requests are not mixed with the rest), the call system
that has been served least, per unit of its weight, goes next; within a call system the policy's own key
decides (predicted remaining time for the semantic policy). So a call system flooding the centre with ESI-3
calls cannot make another's ESI-3 calls wait behind all of its own: each gets service in proportion to its
weight while both have calls waiting, and a call system alone keeps exactly the policy's order.

The counters (VTC), one per call system and level, because fair share is a matter within a level: the
service a call system's ESI-2 calls got must not make its ESI-3 calls wait behind another's flood of ESI 3
(measured, seed 0: with one counter per call system the quiet system's ESI-3 p90 wait rose from 2.4 s to 8.0 s under
a flood, ``python -m scheduler.fair_share_bench``):
- each iteration charges every batch member's (call system, level) ``(prefilled tokens + OUTPUT_WEIGHT x
  emitted tokens) / weight`` (VTC's w_p = 1, w_q = 2: an output token costs a decode step, input tokens share
  one);
- a (call system, level) with nothing waiting is lifted to the least counter of that level among those with
  calls waiting when its next call arrives, so time without calls is not saved up as credit to burst with
  later (VTC line 9).

Costs, k call systems with calls waiting (a handful): ``peek``/``pop`` O(k + log n), ``push`` O(log n) plus
O(k) when a call system becomes active, ``charge`` O(1).
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping

from scheduler.policies.schedule_queue import ScheduleEntry, ScheduleQueue, _new_entry
from scheduler.request import Request

OUTPUT_WEIGHT = 2.0  # VTC's w_q / w_p: the relative cost of an output token against a prompt token


def fairness_class(key: tuple) -> tuple:
    """The part of a key fair share never reorders: the (effective) level and, for policies with aging, whether
    the request is overdue (the first two fields of an urgency-aware policy's key)."""
    return key[:2]


class FairShareQueue(ScheduleQueue):
    """The schedule queue with a heap per call system, merged by level, then by the call system's virtual token
    counter, then by the policy's key. ``weights``: a call system's share (default 1); ``enabled`` False merges
    by key alone (the policy's order across call systems)."""

    def __init__(self, weights: Mapping[str, float] | None = None, enabled: bool = True) -> None:
        super().__init__()
        self.weights: dict[str, float] = dict(weights or {})
        self.enabled = enabled
        self.counters: dict[tuple[str, int], float] = {}  # (call system, level) -> service / weight
        self._heaps: dict[str, list[ScheduleEntry]] = {}  # per call system
        self._waiting: Counter[tuple[str, int]] = Counter()  # live entries per (call system, level)
        self._counted_as: dict[str, tuple[str, int]] = {}  # request id -> the (call system, level) it waits under

    # --- the counters ----------------------------------------------------------------------------------
    def weight(self, client: str) -> float:
        return max(1e-6, float(self.weights.get(client, 1.0)))

    def charge(self, client: str, level: int, prefilled_tokens: int, emitted_tokens: int) -> None:
        """Service given to ``client``'s calls of ``level`` in one iteration. O(1)."""
        cost = prefilled_tokens + OUTPUT_WEIGHT * emitted_tokens
        self.counters[client, level] = self.counters.get((client, level), 0.0) + cost / self.weight(client)

    def charge_iteration(self, batch: Iterable[Request], emitted: Mapping[str, int] | None = None) -> None:
        """Charge one iteration of ``batch``, called before its tokens are accounted: each member computes the
        KV of its pending tokens (all of them at a prefill, one at a decode) and emits one token (``emitted[id]``
        under speculative decoding, whose verified draft tokens count as output). O(b)."""
        for r in batch:
            n = 1 if emitted is None else emitted.get(r.id, 1)
            self.charge(r.client, r.level, max(0, r.pending_tokens - 1), n)

    def _activate(self, group: tuple[str, int]) -> None:
        """VTC's lift: a call system with nothing waiting at a level starts from the least counter of those
        waiting at that level."""
        active = [self.counters.get(g, 0.0) for g, n in self._waiting.items() if n > 0 and g[1] == group[1]]
        if active:
            self.counters[group] = max(self.counters.get(group, 0.0), min(active))

    def _wait(self, r: Request) -> None:
        group = (r.client, r.level)
        if not self._waiting[group]:
            self._activate(group)
        self._waiting[group] += 1
        self._counted_as[r.id] = group

    # --- the heaps -------------------------------------------------------------------------------------
    def push(self, r: Request, key: tuple, rekey_at_s: float | None = None) -> None:
        if r.id not in self._live:
            self._wait(r)
        elif self._counted_as[r.id] != (r.client, r.level):  # re-keyed at another level (an override)
            self._unlive(r.id)
            self._wait(r)
        seq = next(self._seq)
        self._live[r.id] = seq
        heapq.heappush(self._heaps.setdefault(r.client, []),
                       _new_entry(ScheduleEntry, (key, self._arrival_order[r.id], seq, r)))
        if rekey_at_s is not None:
            heapq.heappush(self._rekey_events, (rekey_at_s, seq, r))

    def put_back(self, entry: ScheduleEntry) -> None:
        assert entry.seq is not None, "a running request's entry is not a heap entry"
        r = entry.request
        self._live[r.id] = entry.seq
        self._waiting[r.client, r.level] += 1
        self._counted_as[r.id] = (r.client, r.level)
        heapq.heappush(self._heaps.setdefault(r.client, []), entry)

    def peek(self) -> ScheduleEntry | None:
        best: ScheduleEntry | None = None
        for client, heap in self._heaps.items():
            top = self._head(heap)
            if top is not None and (best is None or self._goes_before(top, client, best)):
                best = top
        return best

    def _goes_before(self, a: ScheduleEntry, client_a: str, b: ScheduleEntry) -> bool:
        if not self.enabled:
            return a < b
        ca, cb = fairness_class(a.key), fairness_class(b.key)
        if ca != cb:
            return ca < cb
        va = self.counters.get((client_a, a.request.level), 0.0)
        vb = self.counters.get((b.request.client, b.request.level), 0.0)
        return va < vb if va != vb else a < b

    def pop(self) -> ScheduleEntry:
        entry = self.peek()
        if entry is None:
            raise IndexError("pop from an empty schedule queue")
        heapq.heappop(self._heaps[entry.request.client])
        self._unlive(entry.request.id)
        return entry

    def _unlive(self, request_id: str) -> None:
        if self._live.pop(request_id, None) is not None:
            self._waiting[self._counted_as.pop(request_id)] -= 1

    def discard(self, request_id: str) -> None:
        self._unlive(request_id)

    def forget(self, request_id: str) -> None:
        self._unlive(request_id)
        self._arrival_order.pop(request_id, None)

    def _entries(self) -> Iterator[ScheduleEntry]:
        for heap in self._heaps.values():
            yield from heap

    def drain(self) -> list[Request]:
        waiting = self.waiting()
        self._heaps, self._live, self._rekey_events = {}, {}, []
        self._waiting.clear()
        self._counted_as.clear()
        return waiting

    def waiting(self) -> list[Request]:
        return [e.request for e in self._entries() if self._live.get(e.request.id) == e.seq]
