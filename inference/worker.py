"""The inference worker process: Redis stream in, engine loop, tokens and state out.

Threads:
- intake: reads the inference stream through the consumer group (after first reclaiming entries left
  pending by a dead worker) into the scheduler's arrival buffer (`engine.add_request`, O(1)). An entry says
  which call is ready; what to generate (prompt, current level and tier, arrival) comes from the database, so
  an override made while no worker listened is not lost, and an entry left over from another database cannot
  put its prompt on a call that now has its id. No error ends it (a Redis or database outage: it retries,
  then re-reads what was delivered to it);
- control: Redis pub/sub `triage:control`: config reloads, re-prioritisation, cancellation;
- metrics: a Prometheus text endpoint (optional);
- main: the engine loop. After every iteration it buffers state changes and tokens; every `flush_interval_s`
  it publishes tokens, persists transitions and results in one transaction, and only then acknowledges the
  stream entries of the calls whose result is stored (a failed transaction is retried at the next flush).
  A policy change in the settings hands every live request to a scheduler of the new policy.

SIGTERM: stop reading, finish what was admitted (drain), flush, exit. Anything unfinished stays pending in
the stream and is reclaimed by the next worker: no call is lost, none is stored twice (a reclaimed entry
whose call is already final is acknowledged without generating).

Dead consumers: a live worker re-claims its own in-flight entries every `claim_idle_ms / 3` (XCLAIM to
itself, JUSTID: resets their idle time, a heartbeat), so an entry idle for `claim_idle_ms` belongs to a
worker that died. The intake thread takes such entries over (XAUTOCLAIM) at start and then periodically,
so a worker started under a new name before a dead one's entries were idle long enough still gets them,
and a slow live worker's calls are never generated a second time by its peer.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import redis
from django.db import DatabaseError, close_old_connections, connection

from inference.engine import Engine, StepResult
from inference.guidance.follow import GuidanceFollower
from scheduler.decision import PreemptionMode
from scheduler.policies import make_scheduler
from triage import realtime
from triage.models import CallStatus
from triage.selectors.calls import calls_generation_input
from triage.services import generation

log = logging.getLogger("inference.worker")


@dataclass
class WorkerOptions:
    stream: str
    group: str
    consumer: str
    control_channel: str
    flush_interval_s: float = 0.1
    metrics_interval_s: float = 0.5
    claim_idle_ms: int = 30_000
    read_count: int = 64
    drain_timeout_s: float = 120.0
    metrics_port: int | None = None


@dataclass
class _Pending:
    progress: dict[int, generation.CallProgress] = field(default_factory=dict)
    tokens: list[tuple[int, int, str]] = field(default_factory=list)
    done: list[tuple[int, str]] = field(default_factory=list)  # (call id, final status) for token streams
    replaced: list[tuple[int, str]] = field(default_factory=list)  # (call id, the protocol's text): off protocol
    restarted: list[int] = field(default_factory=list)  # calls generated again from the start

    def of(self, call_id: int) -> generation.CallProgress:
        p = self.progress.get(call_id)
        if p is None:
            p = self.progress[call_id] = generation.CallProgress(call_id)
        return p


class InferenceWorker:
    def __init__(self, engine: Engine, client: redis.Redis, options: WorkerOptions) -> None:
        self.engine = engine
        self.redis = client
        self.opts = options
        self.stopping = threading.Event()  # stop reading the stream; drain
        self.stopped = threading.Event()
        self.reload_config = threading.Event()
        self._wake = threading.Event()
        self._entries: dict[int, list[str]] = defaultdict(list)  # call id -> stream entry ids to acknowledge
        self._entries_lock = threading.Lock()
        self._pending = _Pending()
        self._unacknowledged: list[str] = []  # entries of stored calls that Redis refused to XACK
        self._last_flush = 0.0
        self._last_metrics = 0.0
        self._started_at = time.time()
        self._tokens_window: list[tuple[float, int]] = []
        self.stats: Counter[str] = Counter()
        self._threads: list[threading.Thread] = []
        self._http: ThreadingHTTPServer | None = None
        self.guidance = GuidanceFollower()
        self._readmit: list[int] = []  # calls to admit again under their new plan (engine loop thread)
        self._metrics_snapshot = self.metrics()  # what the metrics endpoint serves; the engine loop refreshes it

    # --- lifecycle ----------------------------------------------------------------------------------------
    def ensure_group(self) -> None:
        try:
            self.redis.xgroup_create(self.opts.stream, self.opts.group, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    def start(self) -> None:
        self.ensure_group()
        self.reclaim()
        for target, name in ((self._intake_loop, "intake"), (self._control_loop, "control")):
            t = threading.Thread(target=target, name=f"inference-{name}", daemon=True)
            t.start()
            self._threads.append(t)
        if self.opts.metrics_port is not None:
            self._start_metrics_server(self.opts.metrics_port)

    def request_stop(self) -> None:
        """SIGTERM: stop taking new calls; the main loop drains what it has and returns."""
        self.stopping.set()
        self._wake.set()

    def run(self) -> None:
        """The engine loop; returns after request_stop() once drained (or the drain timeout)."""
        drain_deadline = None
        while True:
            if self.stopping.is_set():
                drain_deadline = drain_deadline or time.monotonic() + self.opts.drain_timeout_s
                if not self.engine.has_work() or time.monotonic() > drain_deadline:
                    break
            if self.reload_config.is_set():
                self.reload_config.clear()
                self._apply_config()
            if self._readmit:
                self._admit_again()
            if self.engine.has_work():
                self._record(self.engine.step())
            else:
                self._wake.wait(0.05)
                self._wake.clear()
            self._maybe_flush()
        self._maybe_flush(force=True)
        connection.close()
        self.stopped.set()
        if self._http is not None:
            self._http.shutdown()

    # --- intake -------------------------------------------------------------------------------------------
    def reclaim(self) -> int:
        """Take over entries pending on this consumer (a restart) and, after `claim_idle_ms`, on dead ones."""
        claimed = 0
        own = self.redis.xreadgroup(self.opts.group, self.opts.consumer, {self.opts.stream: "0"}, count=10_000)
        for _, entries in own or []:
            claimed += self._admit(entries)
        claimed += self.claim_idle()
        if claimed:
            log.info("reclaimed %d pending stream entries", claimed)
        return claimed

    def claim_idle(self) -> int:
        """XAUTOCLAIM the entries idle for `claim_idle_ms` (their consumer stopped heartbeating: it died)."""
        claimed = 0
        start = "0-0"
        while True:
            reply = self.redis.xautoclaim(
                self.opts.stream, self.opts.group, self.opts.consumer, self.opts.claim_idle_ms, start_id=start,
                count=500,
            )
            start, entries = reply[0], reply[1]
            claimed += self._admit(entries)
            if not entries or start in (b"0-0", "0-0"):
                break
        return claimed

    def heartbeat(self) -> int:
        """Reset the idle time of the entries pending on this consumer, so no peer takes them over while it lives.

        Only entries still owned here are touched: one a peer took over (this worker looked dead, e.g. frozen
        for `claim_idle_ms`) stays with the peer."""
        ids = [
            p["message_id"] for p in self.redis.xpending_range(
                self.opts.stream, self.opts.group, min="-", max="+", count=10_000, consumername=self.opts.consumer,
            )
        ]
        for i in range(0, len(ids), 1000):
            # XCLAIM to itself with JUSTID: the idle time restarts, the delivery count does not grow.
            self.redis.xclaim(self.opts.stream, self.opts.group, self.opts.consumer, 0, ids[i:i + 1000], justid=True)
        return len(ids)

    def _claim_interval_s(self) -> float:
        return max(0.05, self.opts.claim_idle_ms / 3000)

    def _intake_loop(self) -> None:
        """Read new entries; every `claim_idle_ms / 3` heartbeat and take over dead workers' entries. While
        draining (SIGTERM) it reads nothing new but keeps the heartbeat until the engine loop has returned.

        No error ends the thread (it would leave the worker alive but deaf, still heartbeating its calls):
        after a failure it waits, then re-reads the entries already delivered to it, so one that was read but
        not admitted (the database was down) is admitted then."""
        next_claim = time.monotonic() + self._claim_interval_s()
        reread_own = False
        while not self.stopped.is_set():
            try:
                if time.monotonic() >= next_claim:
                    next_claim = time.monotonic() + self._claim_interval_s()
                    self._heartbeat_and_claim()
                if self.stopping.is_set():
                    self.stopped.wait(max(0.0, next_claim - time.monotonic()))
                    continue
                if reread_own:
                    self._read_and_admit("0", block_ms=None)
                    reread_own = False
                self._read_and_admit(">", block_ms=max(1, min(500, int(self._claim_interval_s() * 1000))))
            except Exception:
                log.exception("stream intake failed; retrying in 1 s")
                connection.close()  # a broken connection is replaced at the next query
                reread_own = True
                self.stopped.wait(1.0)
        connection.close()  # this thread's own database connection

    def _read_and_admit(self, start: str, *, block_ms: int | None) -> None:
        """Admit entries from the stream: ">" new ones, "0" those already delivered to this consumer."""
        count = self.opts.read_count if start == ">" else 10_000  # a re-read takes every entry still pending
        reply = self.redis.xreadgroup(
            self.opts.group, self.opts.consumer, {self.opts.stream: start}, count=count, block=block_ms,
        )
        for _, entries in reply or []:
            self._admit(entries)

    def _heartbeat_and_claim(self) -> None:
        try:
            self.heartbeat()
            taken = 0 if self.stopping.is_set() else self.claim_idle()
        except redis.RedisError:
            log.warning("stream heartbeat/claim failed; retrying", exc_info=True)
            return
        if taken:
            log.info("took over %d stream entries left by a dead worker", taken)

    def _admit(self, entries: list) -> int:
        """Hand the calls that stream entries name to the engine, as the database has them (prompt, current level
        and tier, arrival: `calls_generation_input`); the entry's own level and length only stand in for what
        the call's still uncommitted triage will store. Entries of calls already final, or deleted, are
        acknowledged at once."""
        parsed = []
        for entry_id, raw in entries:
            if not raw:
                continue  # deleted entry
            fields = {_s(k): _s(v) for k, v in raw.items()}
            parsed.append((_s(entry_id), fields))
        if not parsed:
            return 0
        close_old_connections()
        current = calls_generation_input(call_ids=[int(f["call_id"]) for _, f in parsed])
        admitted = 0
        for entry_id, f in parsed:
            call_id = int(f["call_id"])
            call = current.get(call_id)
            if call is None:
                self.redis.xack(self.opts.stream, self.opts.group, entry_id)
                continue
            with self._entries_lock:
                seen = entry_id in self._entries[call_id]  # delivered again to this worker (a re-read)
                live = str(call_id) in self.engine.sequences
                if not seen:
                    self._entries[call_id].append(entry_id)
            if seen or live:
                continue  # the call is in the engine: this entry is acknowledged with it
            try:
                self.engine.add_request(
                    str(call_id), call.prompt, level=call.level or int(f.get("level") or 3), tier=call.tier or None,
                    predicted_output_tokens=call.predicted_output_tokens or int(float(f.get("predicted_output_tokens") or 64)),
                    arrival_s=call.accepted_at_s,
                )
                self.guidance.admitted(str(call_id), call.plan, call.generation)
            except Exception:
                with self._entries_lock:  # not admitted: the re-read after this failure must not skip it
                    self._entries[call_id].remove(entry_id)
                raise
            admitted += 1
        self._wake.set()
        return admitted

    # --- control ------------------------------------------------------------------------------------------
    def _control_loop(self) -> None:
        pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
        pubsub.subscribe(self.opts.control_channel)
        while not self.stopped.is_set():
            try:
                message = pubsub.get_message(timeout=0.5)
            except redis.RedisError:
                time.sleep(1.0)
                continue
            if message is None:
                continue
            try:
                self.handle_control(json.loads(_s(message["data"])))
            except (ValueError, KeyError, TypeError):
                log.warning("bad control message: %r", message.get("data"))
        pubsub.close()

    def handle_control(self, message: dict) -> None:
        kind = message.get("kind")
        if kind == "config":
            self.reload_config.set()
        elif kind == "reprioritise":
            self.engine.reprioritise(str(int(message["call_id"])), int(message["level"]), message.get("tier") or None)
        elif kind == "cancel":
            self.engine.cancel(str(int(message["call_id"])))
        elif kind == "regenerate":
            self.regenerate(int(message["call_id"]))
        self._wake.set()

    def regenerate(self, call_id: int) -> None:
        """Generate the call again under the plan the database now gives it (a protocol switch): cancel the
        running generation, then admit the call again with its arrival, so it keeps its place in the queue."""
        rid = str(call_id)
        self.guidance.regenerate(rid)
        if rid in self.engine.sequences:
            self.engine.cancel(rid)  # re-admitted when the engine reports the cancellation (_record)
        else:
            self._readmit.append(call_id)  # finished (its stale result will not be stored) or not admitted yet

    def _admit_again(self) -> None:
        ids, self._readmit = self._readmit, []
        close_old_connections()
        current = calls_generation_input(call_ids=ids)
        for call_id in ids:
            call = current.get(call_id)
            if call is None or str(call_id) in self.engine.sequences:
                continue  # final meanwhile, or admitted already from its new stream entry
            self.engine.add_request(
                str(call_id), call.prompt, level=call.level or 3, tier=call.tier or None,
                predicted_output_tokens=call.predicted_output_tokens or 64, arrival_s=call.accepted_at_s,
            )
            self.guidance.admitted(str(call_id), call.plan, call.generation)
            self._pending.restarted.append(call_id)

    def _apply_config(self) -> None:
        """Apply the stored settings between iterations; a new policy takes over every live request."""
        scheduler = self.engine.scheduler
        if getattr(scheduler, "update_config", None) is None:
            return
        close_old_connections()
        config = generation.scheduler_config_load(base=scheduler.config)
        if config.policy != scheduler.name:
            successor = make_scheduler(config, scheduler.cost)
            scheduler.hand_over(successor, now_s=self.engine.clock())
            self.engine.scheduler = successor
            log.info("scheduling policy switched from %s to %s", scheduler.name, successor.name)
        else:
            scheduler.update_config(config)
        log.info(
            "scheduler configuration reloaded: policy=%s batch_size=%d stage_merge=%s lower_prefill_share=%g eviction=%s",
            config.policy, config.batch_size, config.stage_merge, config.lower_prefill_share, config.eviction,
        )

    # --- after each iteration -------------------------------------------------------------------------------
    def _record(self, result: StepResult) -> None:
        pending = self._pending
        at = datetime.now(UTC)
        for rid, mode, kept in result.preempted:
            pending.of(int(rid)).move(CallStatus.PREEMPTED, at=at, mode=str(mode), kept_tokens=kept)
            self.stats[f"preemptions_{mode}"] += 1
        evicted = {rid for rid, _, _ in result.preempted}
        for rid in result.paused_ids:
            if rid in evicted:
                continue  # paused and evicted in one decision: one preemption, reported with its mode above
            pending.of(int(rid)).move(CallStatus.PREEMPTED, at=at, mode="paused")
            self.stats["preemptions_paused"] += 1
        for t in result.tokens:
            call_id = int(t.request_id)
            if t.index == 0 and result.stage is not None:
                pending.of(call_id).move(CallStatus.PREFILLING, at=at)
            pending.of(call_id).move(CallStatus.DECODING, at=at)
            pending.tokens.append((call_id, t.index, t.text))
            if (replacement := self.guidance.on_token(t.request_id, t.text)) is not None:
                pending.replaced.append((call_id, replacement))
        for f in result.finished:
            call_id = int(f.request_id)
            if f.reason == "cancelled":
                if self.guidance.on_cancelled(f.request_id):
                    self._readmit.append(call_id)  # a protocol switch: generated again, not finished
                    continue
                pending.done.append((call_id, "cancelled"))
                pending.of(call_id)  # nothing to store; acknowledged with the flush
                continue
            followed, replacement = self.guidance.on_done(f.request_id)
            if replacement is not None:
                pending.replaced.append((call_id, replacement))
            pending.of(call_id).finish(text=f.text.strip(), output_tokens=f.output_tokens, plan=followed.plan,
                                       generation=followed.generation, off_protocol=followed.off_protocol, at=at,
                                       reason=f.reason)
            pending.done.append((call_id, "done"))
        now = time.time()
        self._tokens_window.append((now, len(result.tokens)))
        self.stats["tokens"] += len(result.tokens)
        self.stats["iterations"] += 1

    def _maybe_flush(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_flush < self.opts.flush_interval_s:
            return
        self._last_flush = now
        pending, self._pending = self._pending, _Pending()
        try:
            for call_id in pending.restarted:
                realtime.publish_guidance_restart(call_id)
            realtime.publish_tokens(pending.tokens)
            for call_id, text in pending.replaced:
                realtime.publish_guidance_replaced(call_id, text)
        except redis.RedisError:
            log.warning("token publish failed (%d tokens)", len(pending.tokens), exc_info=True)
        if pending.progress:
            close_old_connections()
            try:
                stored = generation.calls_generation_record(progress=pending.progress.values())
            except DatabaseError:
                # Nothing was written (one transaction): keep the transitions and results for the next flush.
                log.warning("storing generation results failed; retrying at the next flush", exc_info=True)
                connection.close()
                pending.tokens, pending.replaced, pending.restarted = [], [], []  # published already
                self._pending = pending
                return
            self._acknowledge(stored)
        elif self._unacknowledged:
            self._acknowledge([])
        for call_id, status in pending.done:
            try:
                realtime.publish_call_done(call_id, status)
            except redis.RedisError:
                log.warning("done publish failed for call %s", call_id, exc_info=True)
        if force or now - self._last_metrics >= self.opts.metrics_interval_s:
            self._last_metrics = now
            self._publish_metrics()

    def _acknowledge(self, call_ids: list[int]) -> None:
        """XACK the entries of calls whose result is stored; ones Redis refused are retried at the next flush."""
        ids, self._unacknowledged = self._unacknowledged, []
        with self._entries_lock:
            for call_id in call_ids:
                if str(call_id) in self.engine.sequences:
                    continue  # still generating (e.g. a transition of a running call); not done yet
                ids.extend(self._entries.pop(call_id, []))
        if not ids:
            return
        try:
            self.redis.xack(self.opts.stream, self.opts.group, *ids)
        except redis.RedisError:
            log.warning("acknowledging %d stream entries failed; retrying", len(ids), exc_info=True)
            self._unacknowledged = ids
            return
        self.stats["acknowledged"] += len(ids)

    # --- metrics --------------------------------------------------------------------------------------------
    def metrics(self) -> dict:
        now = time.time()
        self._tokens_window = [(t, n) for t, n in self._tokens_window if now - t <= 5.0]
        span = max(1e-6, min(5.0, now - self._started_at))
        scheduler = self.engine.scheduler
        memory = getattr(scheduler, "memory", None)
        used = getattr(memory, "used_blocks", 0)
        capacity = getattr(memory, "capacity_blocks", 0) or 1
        running = set(self.engine.runner.batch_ids)
        depth: Counter[int] = Counter()
        for seq in list(self.engine.sequences.values()):
            if seq.request.id not in running:
                depth[seq.request.level] += 1
        return {
            "tokens_per_s": round(sum(n for _, n in self._tokens_window) / span, 1),
            "running": len(running),
            "waiting": sum(depth.values()),
            "queue_depth_by_esi": {str(level): depth.get(level, 0) for level in range(1, 6)},
            "kv_used_blocks": used,
            "kv_capacity_blocks": capacity,
            "kv_use": round(used / capacity, 4),
            "kv_tokens_device": self.engine.kv_tokens_on_device(),
            "kv_tokens_host": self.engine.store.host_tokens(),
            "preemptions": {m: self.stats.get(f"preemptions_{m}", 0) for m in ("swap", "drop", "partial", "paused")},
            "preemptions_total": sum(self.stats.get(f"preemptions_{m}", 0) for m in ("swap", "drop", "partial", "paused")),
            "tokens_total": self.stats["tokens"],
            "off_protocol_sentences_total": self.guidance.off_protocol_total,
            "iterations_total": self.stats["iterations"],
            "updated_at": round(now, 3),
        }

    def _publish_metrics(self) -> None:
        m = self._metrics_snapshot = self.metrics()
        fields = {k: v for k, v in m.items() if not isinstance(v, dict)}
        try:
            self.redis.hset(realtime.ENGINE_METRICS_KEY, mapping=fields)
        except redis.RedisError:
            log.debug("engine metrics not published", exc_info=True)

    def prometheus_text(self) -> str:
        """The engine loop's latest metrics (computed on its thread: the HTTP thread must not read the engine's
        structures while the loop changes them)."""
        m = self._metrics_snapshot
        lines = [
            "# TYPE triage_inference_queue_depth gauge",
            *(f'triage_inference_queue_depth{{esi="{k}"}} {v}' for k, v in m["queue_depth_by_esi"].items()),
            "# TYPE triage_inference_preemptions_total counter",
            *(f'triage_inference_preemptions_total{{mode="{k}"}} {v}' for k, v in m["preemptions"].items()),
            "# TYPE triage_inference_tokens_per_second gauge", f"triage_inference_tokens_per_second {m['tokens_per_s']}",
            "# TYPE triage_inference_tokens_total counter", f"triage_inference_tokens_total {m['tokens_total']}",
            "# TYPE triage_inference_off_protocol_sentences_total counter",
            f"triage_inference_off_protocol_sentences_total {m['off_protocol_sentences_total']}",
            "# TYPE triage_inference_running gauge", f"triage_inference_running {m['running']}",
            "# TYPE triage_inference_kv_use_ratio gauge", f"triage_inference_kv_use_ratio {m['kv_use']}",
            "# TYPE triage_inference_kv_tokens gauge",
            f'triage_inference_kv_tokens{{where="device"}} {m["kv_tokens_device"]}',
            f'triage_inference_kv_tokens{{where="host"}} {m["kv_tokens_host"]}',
        ]
        return "\n".join(lines) + "\n"

    def _start_metrics_server(self, port: int) -> None:
        worker = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path.rstrip("/") != "/metrics":
                    self.send_error(404)
                    return
                body = worker.prometheus_text().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=self._http.serve_forever, name="inference-metrics", daemon=True).start()
        log.info("metrics on http://127.0.0.1:%d/metrics", self._http.server_address[1])


def _s(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# Re-exported for callers that map preemption modes to labels.
PREEMPTION_MODES = tuple(str(m) for m in PreemptionMode)
