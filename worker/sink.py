"""What the engine loop produced, on its way out: tokens to the board, transitions and results to the database,
acknowledgements to the stream, in that order.

Every engine iteration's result is buffered (``record``); every ``flush_interval_s`` the buffer is published and
stored in one transaction (``flush``), and only then are the stream entries of the calls whose result is stored
acknowledged. A failed transaction keeps the buffer for the next flush; an acknowledgement Redis refused is
retried then too.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import redis
from django.db import DatabaseError, close_old_connections, connection

from inference.engine import StepResult
from inference.guidance.follow import GuidanceFollower
from scheduler.config import SchedulerConfig
from scheduler.request import Request
from triage import realtime
from triage.models import CallStatus
from triage.services import generation
from worker.request_ids import call_id_of, request_id

from .intake import StreamIntake, WorkerOptions
from .metrics import PAUSED, WorkerMetrics

log = logging.getLogger("worker")

# A call whose generation the model keeps failing on is shown as failed rather than retried forever.
MAX_GENERATION_ATTEMPTS = 3


@dataclass
class Pending:
    """What happened since the last flush."""

    progress: dict[int, generation.CallProgress] = field(default_factory=dict)
    tokens: list[tuple[int, int, str]] = field(default_factory=list)
    done: list[tuple[int, str]] = field(default_factory=list)  # (call id, final status) for token streams
    replaced: list[tuple[int, str]] = field(default_factory=list)  # (call id, the protocol's text): off protocol
    restarted: list[int] = field(default_factory=list)  # calls generated again from the start

    def restart(self, call_id: int) -> None:
        """The call is generated again from the start. The restart marker is published before this flush's
        tokens, so what its cancelled generation left here (tokens, a replacement, a done) is dropped: a replay
        read later shows the new generation only."""
        self.tokens = [t for t in self.tokens if t[0] != call_id]
        self.replaced = [r for r in self.replaced if r[0] != call_id]
        self.done = [d for d in self.done if d[0] != call_id]
        self.restarted.append(call_id)

    def of(self, call_id: int) -> generation.CallProgress:
        p = self.progress.get(call_id)
        if p is None:
            p = self.progress[call_id] = generation.CallProgress(call_id)
        return p


class ResultSink:
    def __init__(self, client: redis.Redis, options: WorkerOptions, intake: StreamIntake, guidance: GuidanceFollower,
                 stats: Counter[str], readmit: Callable[[int], None], metrics: WorkerMetrics) -> None:
        self.redis, self.opts, self.intake, self.guidance, self.stats = client, options, intake, guidance, stats
        self.metrics = metrics
        # call id -> (level, arrival, first token at, its request: level and tier as they are now)
        self._started: dict[int, tuple[int, float, float, Request]] = {}
        self._readmit = readmit
        self.failures: Counter[int] = Counter()  # call id -> generations the model failed on, in this worker
        self.pending = Pending()
        self._unacknowledged: list[str] = []  # entries of stored calls that Redis refused to XACK
        self._last_flush = 0.0

    def record(self, result: StepResult) -> None:
        """Buffer one engine iteration: preemptions, first tokens and decoding, tokens, finished calls."""
        pending = self.pending
        at = datetime.now(UTC)
        config = self.intake.engine.current_config() if result.tokens else None
        for rid in result.prefilling_ids:
            pending.of(call_id_of(rid)).move(CallStatus.PREFILLING, at=at)
        for rid, mode, kept in result.preempted:
            pending.of(call_id_of(rid)).move(CallStatus.PREEMPTED, at=at, mode=str(mode), kept_tokens=kept)
            self.stats[f"preemptions_{mode}"] += 1
        evicted = {rid for rid, _, _ in result.preempted}
        for rid in result.paused_ids:
            if rid in evicted:
                continue  # paused and evicted in one decision: one preemption, reported with its mode above
            pending.of(call_id_of(rid)).move(CallStatus.PREEMPTED, at=at, mode=PAUSED)
            self.stats["preemptions_paused"] += 1
        for t in result.tokens:
            call_id = call_id_of(t.request_id)
            if t.index == 0 and result.stage is not None:
                pending.of(call_id).move(CallStatus.PREFILLING, at=at)
            if t.index == 0:
                self._first_token(call_id, t.request_id)
            self._deadline_gain(call_id, t.index, at.timestamp(), config)
            pending.of(call_id).move(CallStatus.DECODING, at=at)
            pending.tokens.append((call_id, t.index, t.text))
            if (replacement := self.guidance.on_token(t.request_id, t.text)) is not None:
                pending.replaced.append((call_id, replacement))
        for f in result.finished:
            if f.reason == "error":
                self._failed(call_id_of(f.request_id), f.error, at)
            else:
                self._speculation(f.drafted_tokens, f.accepted_tokens)
                self._finished(call_id_of(f.request_id), f.text, f.output_tokens, f.reason, at,
                               acceptance=f.acceptance_rate)
        self.stats["tokens"] += len(result.tokens)
        self.stats["iterations"] += 1

    def _first_token(self, call_id: int, request_id: str) -> None:
        seq = self.intake.engine.sequences.get(request_id)
        if seq is None:
            return
        level, arrival, now = seq.request.level, seq.request.arrival_s, time.time()
        self._started[call_id] = (level, arrival, now, seq.request)
        self.metrics.observe_first_token(level, now - arrival)

    def _deadline_gain(self, call_id: int, index: int, t_s: float, config: SchedulerConfig) -> None:
        """PROSERVE's TDG of the call's token ``index`` (0-based) delivered at ``t_s``, by the level and tier the
        call has now; counted from the first token this worker saw (``_started``)."""
        started = self._started.get(call_id)
        if started is not None:
            r = started[3]
            self.metrics.observe_token(r.level, config.tier_for(r.tier, r.level), index=index + 1, t_s=t_s,
                                       arrival_s=r.arrival_s)

    def _speculation(self, drafted: int, accepted: int) -> None:
        self.stats["draft_tokens_accepted"] += accepted
        self.stats["draft_tokens_rejected"] += drafted - accepted

    def _finished(self, call_id: int, text: str, output_tokens: int, reason: str, at: datetime, *,
                  acceptance: float | None = None) -> None:
        pending = self.pending
        started = self._started.pop(call_id, None)
        if started is not None and reason != "cancelled":
            level, arrival, first_token_at, _ = started
            now = time.time()
            tpot = (now - first_token_at) / (output_tokens - 1) if output_tokens > 1 else None
            self.metrics.observe_done(level, now - arrival, tpot)
        if reason == "cancelled":
            if self.guidance.on_cancelled(request_id(call_id)):
                self._readmit(call_id)  # a protocol switch: generated again, not finished
                return
            pending.done.append((call_id, "cancelled"))
            pending.of(call_id)  # nothing to store; acknowledged with the flush
            return
        followed, replacement = self.guidance.on_done(request_id(call_id))
        if replacement is not None:
            pending.replaced.append((call_id, replacement))
        pending.of(call_id).finish(text=text.strip(), output_tokens=output_tokens, plan=followed.plan,
                                   generation=followed.generation, off_protocol=followed.off_protocol, at=at,
                                   reason=reason, draft_acceptance=acceptance)
        pending.done.append((call_id, "done"))

    def _failed(self, call_id: int, error: str, at: datetime) -> None:
        """The model failed on the call's batch: generated again from the start, up to MAX_GENERATION_ATTEMPTS
        times in this worker, then ``failed`` (a supervisor may retry it from the board or the API)."""
        self.guidance.forget(request_id(call_id))
        self.failures[call_id] += 1
        self.stats["generation_errors"] += 1
        if self.failures[call_id] < MAX_GENERATION_ATTEMPTS:
            log.warning("call %s: generation failed (%s), attempt %d of %d; generating it again", call_id, error,
                        self.failures[call_id], MAX_GENERATION_ATTEMPTS, extra={"call_id": call_id})
            self._readmit(call_id)
            return
        del self.failures[call_id]
        log.error("call %s: generation failed %d times (%s); the call is failed", call_id, MAX_GENERATION_ATTEMPTS, error,
                  extra={"call_id": call_id})
        self.pending.of(call_id).move(CallStatus.FAILED, at=at, reason="generation failed", error=error)
        self.pending.done.append((call_id, "failed"))

    def due(self) -> bool:
        return time.monotonic() - self._last_flush >= self.opts.flush_interval_s

    def flush(self) -> None:
        """Publish, store in one transaction, acknowledge; on a database error keep everything for next time."""
        self._last_flush = time.monotonic()
        pending, self.pending = self.pending, Pending()
        self._publish_stream_events(pending)
        if pending.progress:
            close_old_connections()
            try:
                stored = generation.calls_generation_record(progress=pending.progress.values())
            except DatabaseError:
                # Nothing was written (one transaction): keep the transitions and results for the next flush.
                log.warning("storing generation results failed; retrying at the next flush", exc_info=True)
                connection.close()
                pending.tokens, pending.replaced, pending.restarted = [], [], []  # published already
                self.pending = pending
                return
            self._acknowledge(stored)
        elif self._unacknowledged:
            self._acknowledge([])
        for call_id, status in pending.done:
            try:
                realtime.publish_call_done(call_id, status)
            except redis.RedisError:
                log.warning("done publish failed for call %s", call_id, exc_info=True, extra={"call_id": call_id})

    def _publish_stream_events(self, pending: Pending) -> None:
        try:
            for call_id in pending.restarted:
                realtime.publish_guidance_restart(call_id)
            realtime.publish_tokens(pending.tokens)
            for call_id, replacement in pending.replaced:
                realtime.publish_guidance_replaced(call_id, replacement)
        except redis.RedisError:
            log.warning("token publish failed (%d tokens)", len(pending.tokens), exc_info=True)

    def _acknowledge(self, call_ids: list[int]) -> None:
        """XACK the entries of calls whose result is stored; ones Redis refused are retried at the next flush."""
        ids = self._unacknowledged + self.intake.take_entries(call_ids)
        self._unacknowledged = []
        if not ids:
            return
        try:
            self.redis.xack(self.opts.stream, self.opts.group, *ids)
        except redis.RedisError:
            log.warning("acknowledging %d stream entries failed; retrying", len(ids), exc_info=True)
            self._unacknowledged = ids
            return
        self.stats["acknowledged"] += len(ids)
