"""The machinery every policy shares: arrival buffer, schedule queue, top-b selection; KV allocation is delegated.

A policy is this class plus an ordering key (``priority_key``: lower runs first) and four switches:
``preemptive`` (a better waiting request displaces a running one at an iteration boundary), ``stage_aware``
(Hua et al. Algorithm 3, stage_merge.py: when the best request p* is decoding, prefills wait),
``running_keys_improve`` (a running request's key only gets better as it runs, which allows the O(1) fast
path below) and ``urgency_aware`` (the key depends on the ESI level: the intake then classifies a burst's
likely urgent calls first, triage/services/batching.py; an urgency-blind policy gets arrival order there too).

Data structures and their costs (n waiting, b batch size):
- ``arrival_buffer``: deque, ``submit`` is an O(1) append, safe from another thread (CPython's deque
  append/popleft are atomic); drained into the heap at the start of ``schedule``, O(log n) per arrival.
- ``schedule_queue`` (schedule_queue.py): the schedule heap of waiting requests by ``(key, arrival order)``,
  lazily invalidated, push and pop O(log n); with the times at which a waiting key changes (aging steps).
- ``kv`` (allocation.py): the KV allocator, holding the block accounting and the ``eviction_heap`` of
  resident requests not in the batch, worst first, O(log n) per victim.

``schedule`` is O(b log n + b log b): it pops heap entries only while they beat the worst selected request,
so in steady state (nothing better waiting) it peeks at the heap top and keeps the batch: O(b).
Control calls (``cancel``, ``reprioritise``, ``update_config``) are queued the same thread-safe way and
applied at the next ``schedule``.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from scheduler.config import ESI_LEVELS, SchedulerConfig, TierPolicy
from scheduler.cost import CostModel
from scheduler.decision import Decision, KVUsage
from scheduler.memory import EvictionHeap, KVMemory
from scheduler.policies.allocation import KVAllocator
from scheduler.policies.displacement import preemption_allowed
from scheduler.policies.fair_share import FairShareQueue
from scheduler.policies.schedule_queue import ScheduleEntry
from scheduler.policies.stage_merge import StageMerge, decode_ready
from scheduler.policies.surge_slots import take_surge_slots
from scheduler.request import Request, Stage


class BaseScheduler:
    name = "base"
    preemptive = True
    stage_aware = False
    running_keys_improve = True
    urgency_aware = False

    def __init__(self, config: SchedulerConfig, cost: CostModel):
        self.config, self.cost = config, cost
        self.arrival_buffer: deque[Request] = deque()
        self._control: deque[tuple[str, Any]] = deque()
        self.schedule_queue = FairShareQueue(config.client_weights, config.fair_share)  # one heap per call system
        self.requests: dict[str, Request] = {}  # every request not yet done or cancelled
        self.running: list[Request] = []  # the last batch, less the finished
        self._running_keys: dict[str, tuple] = {}  # keys computed when last selected (stale but >= true)
        self._cancelled_out: list[Request] = []
        self._tier_cache: dict[tuple[str | None, int], TierPolicy] = {}
        self.kv = KVAllocator(self, config)  # reads this scheduler's cost model
        self.stage_merger = StageMerge()  # Algorithm 3, with the lower-prefill credit
        self.preemptions = 0

    # The allocator's state, read through the scheduler by the simulator's report, metrics and tests.
    @property
    def memory(self) -> KVMemory:
        return self.kv.memory

    @property
    def eviction_heap(self) -> EvictionHeap:
        return self.kv.eviction_heap

    @property
    def swapped_tokens(self) -> int:
        return self.kv.swapped_tokens

    @property
    def recomputed_tokens(self) -> int:
        return self.kv.recomputed_tokens

    # --- the Scheduler protocol ------------------------------------------------------------------------
    def submit(self, request: Request) -> None:
        """O(1), thread-safe: the request waits in the unsorted arrival buffer until the next decision."""
        self.arrival_buffer.append(request)

    def cancel(self, request_id: str) -> None:
        self._control.append(("cancel", request_id))

    def reprioritise(self, request_id: str, level: int, tier: str | None = None) -> None:
        """A new level (a dispatcher override) and the tier that goes with it; ``tier`` None: the tier
        configured for the new level (its aging, reservation, preemption cap and targets follow the level)."""
        if level not in ESI_LEVELS:
            raise ValueError("level must be an ESI level 1..5")
        self._control.append(("reprioritise", (request_id, level, tier or None)))

    def update_config(self, config: SchedulerConfig | None = None, *, cost: CostModel | None = None) -> None:
        """At the next decision: an administrator's change (None: keep) and/or a new cost model; re-keys the queue."""
        self._control.append(("config", (config, cost)))

    def has_work(self) -> bool:
        return bool(self.arrival_buffer or self.requests or self._control or self._cancelled_out)

    def hand_over(self, successor: BaseScheduler, now_s: float) -> None:
        """Give every live request to ``successor`` (a fresh scheduler, e.g. of another policy): waiting,
        paused and running ones with their KV accounting; running ones become waiting with their KV on device,
        and the successor's first decision selects its own batch. The successor takes over this scheduler's
        arrival buffer and control queue themselves, so a submit racing the hand-over is not lost. Call it
        between iterations. O(n log n)."""
        successor.arrival_buffer, successor._control = self.arrival_buffer, self._control
        successor._cancelled_out = self._cancelled_out
        for r in sorted(self.requests.values(), key=lambda r: self.schedule_queue.arrival_order(r.id)):
            if r.stage in (Stage.PREFILL, Stage.DECODE):
                r.stage = Stage.WAITING
            successor.requests[r.id] = r
            successor.schedule_queue.admit(r.id)
            held = self.memory.held_blocks(r.id)
            if held:
                successor.kv.adopt(r, successor.tier(r).name, held, successor.priority_key(r, now_s))
            successor._push(r, now_s)
        successor.preemptions += self.preemptions
        successor.schedule_queue.counters = dict(self.schedule_queue.counters)
        successor.kv.swapped_tokens += self.kv.swapped_tokens
        successor.kv.recomputed_tokens += self.kv.recomputed_tokens
        self.requests, self.running, self._cancelled_out = {}, [], []

    def schedule(self, now_s: float) -> Decision:
        self._drain_arrivals(now_s)
        self._apply_control(now_s)
        self._fire_rekey_events(now_s)
        decision = Decision(stage=None, cancelled=self._cancelled_out)
        self._cancelled_out = []
        batch = self._fast_path() if self.running_keys_improve else None
        if batch is None:
            batch = self._select(now_s, decision)
        if batch:
            self.kv.allocate(now_s, batch, decision)
        if batch:
            decision.stage = Stage.DECODE if all(decode_ready(r) for r in batch) else Stage.PREFILL
            for r in batch:
                r.stage = decision.stage
        decision.batch = batch
        self.running = batch
        return decision

    def complete_iteration(self, now_s: float, decision: Decision, finished_ids: Iterable[str],
                           emitted: Mapping[str, int] | None = None) -> None:
        """Every batch member emitted one token (``emitted[id]`` where speculative decoding gave it more): its
        whole context (but the newest token) now has KV on device. O(b)."""
        finished = set(finished_ids)
        self.schedule_queue.charge_iteration(decision.batch, emitted)  # before the step's tokens are accounted
        still_running = []
        keys = self._running_keys
        for r in decision.batch:
            if r.is_finished:
                continue
            n = 1 if emitted is None else emitted.get(r.id, 1)
            key = keys.get(r.id)
            if key is not None:  # advance_key knows one step; a multi-token step is re-keyed at the next selection
                key = self.advance_key(r, key) if decode_ready(r) and n == 1 else None
                if key is None:
                    del keys[r.id]
                else:
                    keys[r.id] = key
            r.kv_tokens_on_device = r.prompt_tokens + r.generated_tokens + n - 1
            r.kv_tokens_on_host = 0
            r.generated_tokens += n
            if r.first_token_s is None:
                r.first_token_s = now_s
            if r.refined_remaining_tokens is not None:
                r.refined_remaining_tokens = max(0.0, r.refined_remaining_tokens - n)
            if r.id in finished:
                r.stage = Stage.DONE
                r.finish_s = now_s
                self._forget(r)
            else:
                r.stage = Stage.DECODE
                still_running.append(r)
        self.running = still_running

    # --- what a policy defines -----------------------------------------------------------------------
    def priority_key(self, r: Request, now_s: float) -> tuple:
        raise NotImplementedError

    def next_rekey_s(self, r: Request, now_s: float) -> float | None:
        """When ``r``'s key next changes with time alone (None: never)."""
        return None

    def advance_key(self, r: Request, key: tuple) -> tuple | None:
        """``r``'s key after one more decode step, computed from its key before it (called before the
        step is accounted); None: recompute it at the next full selection. Policies whose key ends with the
        predicted remaining seconds subtract the step's solo cost, gamma1 * context + gamma2, exactly the
        difference of ``CostModel.decode_s`` over one step: O(1) with no tier look-up."""
        return None

    def displaces(self, waiting_key: tuple, running_key: tuple) -> bool:
        """Whether a waiting request whose key beats a running request's may take its slot; O(1)."""
        return True

    def preemptible(self, r: Request) -> bool:
        """Whether a running request may be displaced: limited preemption (TRAIL) and the tier's cap."""
        return preemption_allowed(r.preemptions, self.tier(r).max_preemptions, r.generated_tokens,
                                  r.predicted_output_tokens, self.limited_preemption_c)

    @property
    def limited_preemption_c(self) -> float | None:
        return self.config.limited_preemption_c

    def refine_remaining(self, request_id: str, remaining_tokens: float) -> None:
        """TRAIL: a refined prediction of the tokens still to come (used from the next decision on)."""
        r = self.requests.get(request_id)
        if r is not None:
            r.refined_remaining_tokens = float(remaining_tokens)
            self._running_keys.pop(request_id, None)
            self._control.append(("rekey", request_id))  # a waiting request's heap entry is re-keyed too

    # --- helpers policies use ----------------------------------------------------------------------
    def tier(self, r: Request) -> TierPolicy:
        k = (r.tier, r.level)
        t = self._tier_cache.get(k)
        if t is None:
            t = self._tier_cache[k] = self.config.tier_for(r.tier, r.level)
        return t

    def remaining_s(self, r: Request, remaining_tokens: float | None = None) -> float:
        return self.cost.remaining_s(
            context_tokens=r.context_tokens, device_tokens=r.kv_tokens_on_device, host_tokens=r.kv_tokens_on_host,
            generated_tokens=r.generated_tokens,
            remaining_output_tokens=r.predicted_remaining_tokens if remaining_tokens is None else remaining_tokens,
        )

    def kv_usage(self) -> KVUsage:
        return KVUsage(self.memory.used_blocks, self.memory.capacity_blocks)

    def waiting_count(self) -> int:
        return len(self.schedule_queue) + len(self.arrival_buffer)

    # --- queue management ----------------------------------------------------------------------------
    def _drain_arrivals(self, now_s: float) -> None:
        buf = self.arrival_buffer
        while buf:
            r = buf.popleft()
            if r.id in self.requests:
                continue  # a duplicate submit (e.g. a reclaimed stream entry): keep the first
            self.requests[r.id] = r
            self.schedule_queue.admit(r.id)
            self._push(r, now_s)

    def _push(self, r: Request, now_s: float) -> None:
        """(Re-)key ``r`` in the schedule queue, with the time its key next changes by itself. O(log n)."""
        key = self.priority_key(r, now_s)
        t = self.next_rekey_s(r, now_s)
        self.schedule_queue.push(r, key, t if t is not None and t > now_s else None)

    def _fire_rekey_events(self, now_s: float) -> None:
        for r in self.schedule_queue.due_rekeys(now_s):
            self._push(r, now_s)

    def _forget(self, r: Request) -> None:
        self.requests.pop(r.id, None)
        self.schedule_queue.forget(r.id)
        self._running_keys.pop(r.id, None)
        self.kv.release(r.id)

    def _apply_control(self, now_s: float) -> None:
        while self._control:
            kind, arg = self._control.popleft()
            if kind == "cancel":
                r = self.requests.get(arg)
                if r is not None:
                    r.stage = Stage.CANCELLED
                    r.finish_s = now_s
                    self._forget(r)
                    self.running = [x for x in self.running if x is not r]
                    self._cancelled_out.append(r)
            elif kind == "reprioritise":
                request_id, level, tier = arg
                r = self.requests.get(request_id)
                if r is not None:
                    r.level, r.tier = level, tier
                    self._running_keys.pop(r.id, None)
                    if r.id in self.schedule_queue:
                        self._push(r, now_s)
                    if r.id in self.eviction_heap:
                        self.eviction_heap.push(r, self.priority_key(r, now_s))
            elif kind == "rekey":
                r = self.requests.get(arg)
                if r is not None and r.id in self.schedule_queue:
                    self._push(r, now_s)
            elif kind == "config":
                self._reconfigure(*arg, now_s)

    def _reconfigure(self, config: SchedulerConfig | None, cost: CostModel | None, now_s: float) -> None:
        config = self.config = config or self.config
        self.cost = cost or self.cost
        self._tier_cache.clear()
        self.kv.reconfigure(config)
        self.schedule_queue.weights, self.schedule_queue.enabled = dict(config.client_weights), config.fair_share
        self._running_keys.clear()
        for r in self.schedule_queue.drain():  # O(n log n), once per change of settings or cost model
            self._push(r, now_s)

    # --- selection (Hua et al. Algorithms 2-3) ---------------------------------------------------------
    def _fast_path(self) -> list[Request] | None:
        """Keep the running batch when it is full, all decoding, and no waiting request beats its worst
        (stale, hence not better than the true) key: O(b) with no key computation."""
        running = self.running
        if len(running) != self.config.batch_size or not self.preemptive:
            return None if self.preemptive or len(running) < self.config.batch_size else list(running)
        keys = self._running_keys
        worst = None
        for r in running:
            k = keys.get(r.id)
            if k is None:
                return None
            if worst is None or k > worst:
                worst = k
        top = self.schedule_queue.peek()
        if top is not None and top.key < worst and self.displaces(top.key, worst):
            return None
        return list(running)

    def _select(self, now_s: float, decision: Decision) -> list[Request]:
        """Top-b of (running + waiting) by key, stage-aware; O(b log n)."""
        b = self.config.batch_size
        queue = self.schedule_queue
        pinned: list[ScheduleEntry] = []
        selected: list[ScheduleEntry] = []  # sorted, best first
        keys = self._running_keys
        for r in self.running:
            k = keys.get(r.id)
            if k is None:
                k = keys[r.id] = self.priority_key(r, now_s)
            entry = queue.running_entry(r, k)
            if self.preemptive and self.preemptible(r):
                selected.append(entry)
            else:
                pinned.append(entry)
        selected.sort()
        slots = b - len(pinned)
        dropped: list[ScheduleEntry] = []
        while True:
            top = queue.peek()
            if top is None:
                break
            if len(selected) < slots:
                bisect.insort(selected, queue.pop())
            elif selected and not selected[-1].from_heap and top < selected[-1] and self.displaces(
                # only a running worst can lose its slot, where the policy says so: one popped earlier ranks
                # before top in the queue's order (by key, or by fair share among call systems)
                top.key, selected[-1].key
            ):
                bisect.insort(selected, queue.pop())
                dropped.append(selected.pop())
            else:
                break
        while len(selected) > max(0, slots):
            dropped.append(selected.pop())
        if self.config.surge_extra_slots and self.urgency_aware:  # keys start with the (effective) level
            dropped = take_surge_slots(selected, dropped, queue, self.config.surge_extra_slots)
        candidates = pinned + selected
        if self.stage_aware and candidates:
            best = min(candidates)
            if decode_ready(best.request) or self.config.stage_merge == "strict":
                candidates = self.stage_merger.hold_back_lower_prefills(
                    best, candidates, dropped, queue=queue, config=self.config, cost=self.cost,
                    remaining_s=self.remaining_s,
                )
        for e in dropped:
            if e.from_heap:  # key unchanged: put the entry back as it was
                queue.put_back(e)
            else:
                self.return_to_queue(e.request, now_s, decision)
        candidates.sort()
        for e in candidates:
            self._running_keys[e.request.id] = e.key
        return [e.request for e in candidates]

    def may_lose_slot_to_memory(self, r: Request) -> bool:
        """A running request may leave the batch for a better member's KV only where it is preemptible."""
        return self.preemptive and self.preemptible(r)

    def rekey_if_waiting(self, r: Request, now_s: float) -> None:
        if r.id in self.schedule_queue:
            self._push(r, now_s)

    def return_to_queue(self, r: Request, now_s: float, decision: Decision) -> None:
        """A request not selected: back into the schedule heap; a displaced running one is paused, its KV
        stays resident (an eviction candidate)."""
        if r.stage in (Stage.PREFILL, Stage.DECODE):
            r.stage = Stage.WAITING
            r.preemptions += 1
            self.preemptions += 1
            decision.paused.append(r)
        self._running_keys.pop(r.id, None)
        self._push(r, now_s)
        if r.kv_tokens_on_device and r.id not in self.eviction_heap:
            self.eviction_heap.push(r, self.priority_key(r, now_s))

