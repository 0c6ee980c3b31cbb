"""The worker's executor for ``INFERENCE_BACKEND=vllm``: one or more vLLM OpenAI-compatible servers.

The pool keeps the global queue of the calls it holds and, each step, hands the most urgent ones to a replica
by the routing rule (``VLLM_ROUTING``, ``scheduler.routing``: where it starts soonest, or PROSERVE's GoRouting
on each replica's observed step time), and a replica only as many as can start there
soon: a free slot, and at most ``max_unstarted`` of its calls still awaiting their first token (a server
prefills a few calls per step; a call handed over long before is committed to it, and a more urgent later
arrival could overtake it only by a preemption); each submitted call streams its tokens over
SSE in a thread of its own, and ``step()`` turns what arrived since into the same ``StepResult`` our engine
returns, so the worker's persistence, streaming and acknowledgement do not change.

Modes (``VLLM_POLICY``), for the servers' own ``--scheduling-policy``:
- ``semantic``: servers run our plug-in (``vllm_scheduler.Semantic[Async]VllmScheduler``); each call carries its ESI
  level, predicted length, acceptance time and tier rules (``vllm_xargs``); the pool routes by urgency.
- ``priority``: vLLM's stock priority policy (``priority`` = ESI level); every call is submitted at once.
- ``fcfs``: vLLM's stock first-come-first-served; every call is submitted at once.

Abort and resubmit: cancelling closes the call's HTTP stream (vLLM aborts a request whose client went away);
a re-prioritised call, or one whose replica failed mid-generation, goes back to the global queue and is
resubmitted as a continuation (prompt plus the text generated so far, the remaining token budget): nothing
already streamed is lost or repeated. A failed replica gets no calls until its ``/health`` answers again.
"""

from __future__ import annotations

import http.client
import json
import logging
import queue
import socket
import threading
import time
import urllib.parse
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from inference.backends.vllm_replica import Replica, listen_for_preemptions, server_healthy
from inference.engine import FinishedEvent, StepResult, TokenEvent
from scheduler.call_params import CallParams
from scheduler.config import SchedulerConfig
from scheduler.decision import KVUsage, PreemptionMode
from scheduler.policies.displacement import more_urgent_level, never_displaces
from scheduler.preemption_notice import PreemptionNotice, parse_ref, submission_ref
from scheduler.replica_state import ReplicaState, RoutedCall, routed_call
from scheduler.request import Request, Stage
from scheduler.routing import DEFAULT_ROUTING, ROUTING_RULES, RoutingRule, assign
from scheduler.settings_on_vllm import changed_but_not_applied, not_applied

log = logging.getLogger("inference.vllm_pool")

POLICIES = ("semantic", "priority", "fcfs")


@dataclass
class PoolSequence:
    request: Request
    prompt: str
    max_new_tokens: int
    text: str = ""  # generated so far, kept across resubmissions
    tokens: int = 0
    submitted_tokens: int = 0  # tokens generated before the current submission
    replica: str | None = None
    last_token_at: float = 0.0  # monotonic, this submission's latest token: the replica's step time
    submission: int = 0  # events of an earlier submission are stale
    connection: http.client.HTTPConnection | None = None
    stop: str = ""  # why the pool closes the stream: "cancel" or "requeue"


@dataclass(frozen=True)
class _Event:
    kind: str  # "text", "end", "closed", "lost", "error", "preempted"
    request_id: str
    submission: int
    text: str = ""
    finish_reason: str = ""
    completion_tokens: int = 0  # this submission's tokens so far (vLLM's continuous usage)
    computed_tokens: int = 0  # "preempted": the KV its server dropped
    at: float = field(default_factory=time.monotonic)  # when the stream thread saw it


@dataclass
class VllmPool:
    urls: Sequence[str]
    model: str
    policy: str = "semantic"
    capacity: int = 32  # each server's --max-num-seqs
    # Calls a server may hold that have not started (no first token yet), semantic mode: a server prefills a
    # few calls per step, so a call handed over long before its prefill is committed to that server, and one
    # less urgent than a later arrival could only be overtaken by preempting it (a recompute).
    max_unstarted: int = 4
    max_new_tokens: int = 384
    max_model_len: int = 512
    config: SchedulerConfig = field(default_factory=SchedulerConfig)
    tick_s: float = 0.02
    connect_timeout_s: float = 5.0
    # Each replica's preemption-notice endpoint (tcp://host:port, VLLM_EVENTS); none: preemptions inside a
    # server go unrecorded on the call (its stream just pauses)
    events: Sequence[str] = ()
    routing: str = DEFAULT_ROUTING  # VLLM_ROUTING (scheduler.routing.ROUTING_RULES)
    sequences: dict[str, PoolSequence] = field(default_factory=dict)
    constrains_read_out: ClassVar[bool] = False  # the stream guard holds the servers' text
    cost_corrector: ClassVar[None] = None  # the servers schedule by tokens (semantic_token_key): no cost model

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"VLLM_POLICY must be one of {POLICIES}")
        if not self.urls:
            raise ValueError("VLLM_URLS names no server")
        if self.routing not in ROUTING_RULES:
            raise ValueError(f"VLLM_ROUTING must be one of {ROUTING_RULES}")
        self.replicas = {u.rstrip("/"): Replica(u.rstrip("/")) for u in self.urls}
        self.routing_rule = RoutingRule(self.routing)
        self._waiting: list[str] = []
        self._events: queue.Queue[_Event] = queue.Queue()
        self.resubmissions = 0
        # add_request runs in the intake thread, cancel and reprioritise in the control thread, step in the loop
        self._lock = threading.RLock()
        if self.events:
            threading.Thread(target=listen_for_preemptions, args=(self.events, self._on_notice),
                             name="vllm-notices", daemon=True).start()
        log.warning("scheduler settings that vLLM does not apply (scheduler/settings_on_vllm.py): %s",
                    "; ".join(not_applied(self.config)))

    # --- the executor surface (inference.executor.Executor) ---------------------------------------------------
    @property
    def policy_name(self) -> str:
        return f"vllm-{self.policy}"

    def add_request(self, request_id: str, prompt: str, *, level: int, predicted_output_tokens: int,
                    tier: str | None = None, arrival_s: float | None = None,
                    max_new_tokens: int | None = None, read_out: Iterable[str] | None = None,
                    client: str = "") -> Request:
        if read_out is not None:
            raise ValueError("read_out: the vLLM servers' output is held by the stream guard, not constrained")
        request = Request(id=request_id, level=level, tier=tier, client=client,
                          arrival_s=time.time() if arrival_s is None else arrival_s, prompt_tokens=0,
                          predicted_output_tokens=max(1, int(predicted_output_tokens)))
        with self._lock:
            self.sequences[request_id] = PoolSequence(request, prompt, max_new_tokens or self.max_new_tokens)
            self._waiting.append(request_id)
        return request

    def cancel(self, request_id: str) -> None:
        with self._lock:
            seq = self.sequences.get(request_id)
            if seq is None:
                return
            if seq.replica is None:
                seq.stop = "cancel"
                self._waiting.remove(request_id)
                self._events.put(_Event("closed", request_id, seq.submission))
            else:
                self._close(seq, "cancel")

    def reprioritise(self, request_id: str, level: int, tier: str | None = None) -> None:
        with self._lock:
            seq = self.sequences.get(request_id)
            if seq is None:
                return
            seq.request.level, seq.request.tier = int(level), tier
            if seq.replica is not None:
                self._close(seq, "requeue")  # resubmitted with the new priority

    def has_work(self) -> bool:
        return bool(self.sequences)

    def running_ids(self) -> list[str]:
        return [rid for rid, seq in self.sequences.items() if seq.replica is not None]

    def kv_usage(self) -> KVUsage:
        return KVUsage(0, 0)  # the servers page their own KV (their /metrics report it)

    def kv_tokens_on_device(self) -> int:
        return 0

    def kv_tokens_on_host(self) -> int:
        return 0

    def reconfigure(self, config: SchedulerConfig) -> None:
        """Tier rules (aging, preemption cap) reach the servers with each call; the policy is the servers'."""
        for line in changed_but_not_applied(self.config, config):
            log.warning("changed, but vLLM does not apply it: %s", line)
        self.config = config

    def current_config(self) -> SchedulerConfig:
        return self.config

    def step(self) -> StepResult:
        started = time.perf_counter()
        with self._lock:
            self._submit_ready()
            result = StepResult(stage=None, batch_ids=self.running_ids())
        events = self._drain()
        with self._lock:
            for event in events:
                self._apply(event, result)
        result.duration_s = time.perf_counter() - started
        return result

    # --- routing -------------------------------------------------------------------------------------------
    def routed(self, seq: PoolSequence, now: float) -> RoutedCall:
        r = seq.request
        return routed_call(self.config.tier_for(r.tier, r.level), level=r.level, accepted_at=r.arrival_s,
                           predicted_tokens=r.predicted_output_tokens, generated_tokens=seq.tokens, now=now)

    def _submit_ready(self) -> None:
        if not self._waiting:
            return
        now = time.time()
        up = [r for r in self.replicas.values() if r.up]
        if self.policy != "semantic":  # the stock deployment: everything to the least loaded server, at once
            if not up:
                return
            held = {r.name: 0 for r in up}
            for seq in self.sequences.values():
                if seq.replica in held:
                    held[seq.replica] += 1
            for rid in list(self._waiting):
                replica = min(held, key=held.get)
                self._submit(rid, replica)
                held[replica] += 1
            return
        calls = {rid: self.routed(self.sequences[rid], now) for rid in self._waiting}
        held: dict[str, list[RoutedCall]] = {name: [] for name in self.replicas}
        started = dict.fromkeys(self.replicas, 0)
        for seq in self.sequences.values():
            if seq.replica in held:
                held[seq.replica].append(self.routed(seq, now))
                started[seq.replica] += bool(seq.tokens)
        # A server takes a call where it starts soon: a slot, and few calls before it still awaiting prefill.
        states = {r.name: ReplicaState(r.name, min(self.capacity, started[r.name] + self.max_unstarted),
                                       held[r.name], up=r.up, step_s=r.step_s, slots=self.capacity)
                  for r in self.replicas.values()}
        displaces = more_urgent_level if self.config.preempt_on_arrival else never_displaces
        for rid, replica in assign(calls, states, displaces, self.routing_rule):
            self._submit(rid, replica)

    def _submit(self, request_id: str, replica: str) -> None:
        seq = self.sequences[request_id]
        self._waiting.remove(request_id)
        seq.replica, seq.stop, seq.submitted_tokens, seq.last_token_at = replica, "", seq.tokens, 0.0
        seq.submission += 1
        threading.Thread(target=self._stream, args=(seq, replica, seq.submission, self._body(seq)),
                         name=f"vllm-{request_id}", daemon=True).start()

    def _body(self, seq: PoolSequence) -> dict:
        r = seq.request
        remaining = max(1, seq.max_new_tokens - seq.tokens)
        body = {"model": self.model, "prompt": seq.prompt + seq.text, "max_tokens": remaining, "temperature": 0.0,
                "stream": True, "truncate_prompt_tokens": max(1, self.max_model_len - remaining),
                "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
        if self.policy != "fcfs":
            body["priority"] = int(r.level)
        if self.policy == "semantic":
            # a continuation is keyed by what is left of its predicted answer, as the pool keys it
            params = CallParams.for_call(level=r.level, predicted_tokens=max(1, r.predicted_output_tokens - seq.tokens),
                                         accepted_at=r.arrival_s, tier=self.config.tier_for(r.tier, r.level),
                                         config=self.config, ref=submission_ref(r.id, seq.submission))
            body["vllm_xargs"] = params.to_extra_args()
        return body

    # --- streaming (one thread per submission) ---------------------------------------------------------------
    def _stream(self, seq: PoolSequence, replica: str, submission: int, body: dict) -> None:
        rid = seq.request.id
        put = self._events.put
        parts = urllib.parse.urlsplit(replica)
        conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=self.connect_timeout_s)
        seq.connection = conn
        finish = ""
        try:
            conn.connect()
            conn.sock.settimeout(None)  # a call may wait long at a busy server; closing the socket ends the wait
            if seq.stop:
                raise ConnectionAbortedError("closed before it was sent")
            conn.request("POST", f"{parts.path}/v1/completions", json.dumps(body),
                         {"Content-Type": "application/json"})
            response = conn.getresponse()
            if response.status != 200:
                put(_Event("error", rid, submission, text=f"vLLM {response.status}: {response.read()[:300]!r}"))
                return
            for raw in response:
                line = raw.strip()
                if not line.startswith(b"data:") or line == b"data: [DONE]":
                    continue
                chunk = json.loads(line[5:])
                if not chunk.get("choices"):
                    continue  # the closing usage-only chunk
                choice = chunk["choices"][0]
                finish = choice.get("finish_reason") or finish
                usage = chunk.get("usage") or {}
                put(_Event("text", rid, submission, text=choice.get("text") or "",
                           completion_tokens=int(usage.get("completion_tokens") or 0)))
            put(_Event("end" if finish else "lost", rid, submission, finish_reason=finish))
        except (OSError, http.client.HTTPException, ValueError, KeyError, IndexError) as error:
            put(_Event("closed" if seq.stop else "lost", rid, submission, text=str(error)))
        finally:
            conn.close()

    def _on_notice(self, notice: PreemptionNotice) -> None:
        request_id, submission = parse_ref(notice.ref)
        self._events.put(_Event("preempted", request_id, submission, computed_tokens=notice.computed_tokens))

    def _close(self, seq: PoolSequence, why: str) -> None:
        seq.stop = why
        conn = seq.connection
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)  # the reader thread wakes; vLLM aborts the request
            except OSError:
                pass

    def _drain(self) -> list[_Event]:
        events: list[_Event] = []
        try:
            events.append(self._events.get(timeout=self.tick_s))
            while True:
                events.append(self._events.get_nowait())
        except queue.Empty:
            return events

    def _apply(self, event: _Event, result: StepResult) -> None:
        seq = self.sequences.get(event.request_id)
        if seq is None or event.submission != seq.submission:
            return  # a stale submission's tail
        rid = event.request_id
        if event.kind == "text":
            if event.text or seq.tokens == 0:
                result.tokens.append(TokenEvent(rid, seq.tokens, 0, event.text))
                if seq.tokens == 0:
                    result.started_ids.append(rid)
                result.stage = Stage.DECODE
            tokens = max(seq.tokens + 1, seq.submitted_tokens + event.completion_tokens)
            replica = self.replicas.get(seq.replica or "")
            if seq.last_token_at and replica is not None:
                replica.observe_step((event.at - seq.last_token_at) / (tokens - seq.tokens))
            seq.tokens, seq.last_token_at = tokens, event.at
            seq.text += event.text
        elif event.kind == "end":
            self._finish(seq, "length" if event.finish_reason == "length" else "eos", result)
        elif event.kind == "error":
            self._finish(seq, "error", result, error=event.text)
        elif event.kind == "closed" and seq.stop == "cancel":
            self._finish(seq, "cancelled", result)
        elif event.kind == "preempted":  # paused inside its server, which drops its KV and recomputes it
            if seq.replica is not None and event.computed_tokens:  # it had a slot: its server computed some
                if not seq.tokens:
                    result.prefilling_ids.append(rid)  # no token had reached us: it was computing its prompt
                result.preempted.append((rid, PreemptionMode.DROP, 0))
        else:  # lost with its replica, or closed to be resubmitted: back to the global queue, as a continuation
            if event.kind == "lost":
                self._replica_down(seq.replica)
            if seq.tokens:  # a call that had not started is not a preemption
                result.preempted.append((rid, PreemptionMode.DROP, seq.tokens))
            seq.replica, seq.connection, seq.stop = None, None, ""
            self._waiting.append(rid)
            self.resubmissions += 1

    def _finish(self, seq: PoolSequence, reason: str, result: StepResult, error: str = "") -> None:
        rid = seq.request.id
        self.sequences.pop(rid, None)
        result.finished.append(FinishedEvent(rid, seq.text, seq.tokens, reason, error=error))

    # --- replica health ------------------------------------------------------------------------------------
    def _replica_down(self, name: str | None) -> None:
        replica = self.replicas.get(name or "")
        if replica is None or not replica.up:
            return
        log.warning("vLLM server %s failed; its calls go back to the queue", name)
        replica.up = False
        threading.Thread(target=self._wait_until_healthy, args=(replica,), daemon=True).start()

    def _wait_until_healthy(self, replica: Replica) -> None:
        while not replica.up:
            time.sleep(1.0)
            if server_healthy(replica.url):
                log.info("vLLM server %s is back", replica.url)
                replica.up = True
