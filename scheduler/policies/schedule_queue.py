"""The schedule queue (Hua et al. Algorithm 1's ``schedule_heap``): waiting requests, best key first.

A request's ordering is ``(key, arrival_order)``: the policy's key (lower runs first), ties broken by who
arrived first. Keys change (aging, a re-prioritisation, an eviction that adds a reload) far more often than
requests leave, so entries are invalidated lazily: re-keying pushes a new entry and marks it the request's
live one (``seq``); superseded entries are skipped when they reach the top. Costs, n entries in the heap:

- ``push``: O(log n); ``peek``: O(1) amortised (each stale entry is dropped once); ``pop``: O(log n)
- ``discard``, ``in``, ``len``: O(1)
- ``due_rekeys``: O(log e) per event, e pending events (the times at which a waiting key changes by itself)
- ``drain``: O(n), once per administrator change
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator
from typing import NamedTuple

from scheduler.request import Request


class ScheduleEntry(NamedTuple):
    """A request's place in one decision's ranking. Entries compare as tuples, field by field, and the ranking
    is that comparison. Among one decision's candidates ``(key, arrival_order)`` is unique (an arrival order
    is given once per request, and a running request has no live heap entry), so a comparison never reaches
    ``seq``; in the heap a request's stale and live entries tie on both, and ``seq`` decides. The request
    itself is never compared."""

    key: tuple
    arrival_order: int
    seq: int | None  # None: not in the heap (a running request offered to this decision's selection)
    request: Request

    @property
    def from_heap(self) -> bool:
        """Popped from the schedule queue this decision (a waiting request), not taken from the running batch."""
        return self.seq is not None


# ScheduleEntry(...) goes through a Python-level __new__; a decision builds an entry per running request, so
# the queue builds them with tuple.__new__ directly (a few times faster), always with all four fields.
_new_entry = tuple.__new__


class ScheduleQueue:
    """Min-heap of waiting requests with lazy invalidation, the arrival order of every live request, and the
    times at which a waiting request's key next changes."""

    def __init__(self) -> None:
        self._heap: list[ScheduleEntry] = []
        self._live: dict[str, int] = {}  # request id -> seq of its live heap entry
        self._seq = itertools.count()
        self._arrival_order: dict[str, int] = {}
        self._arrivals = itertools.count()
        self._rekey_events: list[tuple[float, int, Request]] = []  # (time, seq of the entry it re-keys, request)

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._live

    # --- arrival order ---------------------------------------------------------------------------------
    def admit(self, request_id: str) -> None:
        """Give a new request the next arrival order (it ranks behind every earlier one on equal keys). O(1)."""
        self._arrival_order[request_id] = next(self._arrivals)

    def arrival_order(self, request_id: str) -> int:
        return self._arrival_order[request_id]

    def forget(self, request_id: str) -> None:
        """The request is done or cancelled: no live entry, no arrival order. O(1)."""
        self._live.pop(request_id, None)
        self._arrival_order.pop(request_id, None)

    # --- the heap --------------------------------------------------------------------------------------
    def push(self, r: Request, key: tuple, rekey_at_s: float | None = None) -> None:
        """Make ``(key, arrival order)`` ``r``'s live entry, superseding any earlier one; ``rekey_at_s``: when
        that key next changes with time alone (``due_rekeys`` reports it then). O(log n)."""
        seq = next(self._seq)
        self._live[r.id] = seq
        heapq.heappush(self._heap, _new_entry(ScheduleEntry, (key, self._arrival_order[r.id], seq, r)))
        if rekey_at_s is not None:
            heapq.heappush(self._rekey_events, (rekey_at_s, seq, r))

    def running_entry(self, r: Request, key: tuple) -> ScheduleEntry:
        """An entry for a running request, to rank it against waiting ones; it is never in the heap. O(1)."""
        return _new_entry(ScheduleEntry, (key, self._arrival_order[r.id], None, r))

    def peek(self) -> ScheduleEntry | None:
        """The best live entry, or None when nothing waits; stale entries on top are dropped. O(1) amortised."""
        return self._head(self._heap)

    def _head(self, heap: list[ScheduleEntry]) -> ScheduleEntry | None:
        """``heap``'s best live entry, dropping the stale ones above it."""
        live = self._live
        while heap:
            top = heap[0]
            if live.get(top.request.id) == top.seq:
                return top
            heapq.heappop(heap)
        return None

    def pop(self) -> ScheduleEntry:
        """Remove and return the best live entry; raises IndexError when nothing waits. O(log n)."""
        heap, live = self._heap, self._live
        while heap:
            entry = heapq.heappop(heap)
            if live.get(entry.request.id) == entry.seq:
                del live[entry.request.id]
                return entry
        raise IndexError("pop from an empty schedule queue")

    def put_back(self, entry: ScheduleEntry) -> None:
        """Return an entry popped this decision, key unchanged, as the request's live entry again. O(log n)."""
        assert entry.seq is not None, "a running request's entry is not a heap entry"
        self._live[entry.request.id] = entry.seq
        heapq.heappush(self._heap, entry)

    def discard(self, request_id: str) -> None:
        """The request no longer waits; its entry is skipped when it reaches the top. O(1)."""
        self._live.pop(request_id, None)

    def due_rekeys(self, now_s: float) -> Iterator[Request]:
        """The waiting requests whose key has changed with time by ``now_s``, each still on the entry the event
        was set for; the caller re-keys each one (pushing new events, all later than ``now_s``) before the
        next is taken. O(log e) per event."""
        events = self._rekey_events
        while events and events[0][0] <= now_s:
            _, seq, r = heapq.heappop(events)
            if self._live.get(r.id) == seq:
                yield r

    def drain(self) -> list[Request]:
        """Empty the heap and the pending re-key events and return the waiting requests (arrival orders are
        kept), so the caller can push them again under new keys. O(n)."""
        waiting = [e.request for e in self._heap if self._live.get(e.request.id) == e.seq]
        self._heap, self._live, self._rekey_events = [], {}, []
        return waiting

    def waiting(self) -> list[Request]:
        """The requests with a live entry, in no particular order. O(n)."""
        return [e.request for e in self._heap if self._live.get(e.request.id) == e.seq]
