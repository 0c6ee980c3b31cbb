"""The inference stream's consumer-group protocol, and admission of the calls its entries name.

An entry only says which call is ready; what to generate (prompt, current level and tier, arrival) comes from
the database (``calls_generation_input``), so an override made while no worker listened is not lost, and an
entry left over from another database cannot put its prompt on a call that now has its id.

Dead consumers: a live worker re-claims its own in-flight entries every ``claim_idle_ms / 3`` (XCLAIM to itself,
JUSTID: resets their idle time, a heartbeat), so an entry idle for ``claim_idle_ms`` belongs to a worker that
died. The intake takes such entries over (XAUTOCLAIM) at start and then periodically, so a worker started under
a new name before a dead one's entries were idle long enough still gets them, and a slow live worker's calls are
never generated a second time by its peer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Collection
from dataclasses import dataclass

import redis
from django.db import close_old_connections, connection

from inference.executor import Executor
from inference.guidance.follow import GuidanceFollower
from triage.contracts import StreamEntry
from triage.selectors.calls import GenerationInput, calls_generation_input
from triage.services.recovery import calls_restream_if_lost
from worker.request_ids import request_id

log = logging.getLogger("worker")


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
    metrics_host: str = "127.0.0.1"
    surge_control: bool = True  # the SLO monitor may change the schedule in a surge (worker/surge.py)


def text(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def group_lost(error: BaseException) -> bool:
    return isinstance(error, redis.ResponseError) and "NOGROUP" in str(error)


class StreamIntake:
    """Reads the stream into the engine; remembers which entries belong to which call until they are
    acknowledged (``take_entries``)."""

    def __init__(self, engine: Executor, client: redis.Redis, options: WorkerOptions, guidance: GuidanceFollower,
                 wake: Callable[[], None]) -> None:
        self.engine, self.redis, self.opts, self.guidance, self._wake = engine, client, options, guidance, wake
        self._entries: dict[int, list[str]] = defaultdict(list)  # call id -> stream entry ids to acknowledge
        self._lock = threading.Lock()
        self.brief_levels: Callable[[], Collection[int]] = tuple  # the surge loop's, set by the worker
        self.on_brief: Callable[[int, GenerationInput], None] = lambda call_id, call: None  # the worker records it

    # --- the consumer group ----------------------------------------------------------------------------
    def ensure_group(self) -> None:
        try:
            self.redis.xgroup_create(self.opts.stream, self.opts.group, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    def reclaim(self) -> int:
        """Take over entries pending on this consumer (a restart) and, after `claim_idle_ms`, on dead ones."""
        claimed = 0
        own = self.redis.xreadgroup(self.opts.group, self.opts.consumer, {self.opts.stream: "0"}, count=10_000)
        for _, entries in own or []:
            claimed += self.admit(entries)
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
            claimed += self.admit(entries)
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

    def claim_interval_s(self) -> float:
        return max(0.05, self.opts.claim_idle_ms / 3000)

    def loop(self, stopping: threading.Event, stopped: threading.Event) -> None:
        """Read new entries; every `claim_idle_ms / 3` heartbeat and take over dead workers' entries. While
        draining (SIGTERM) it reads nothing new but keeps the heartbeat until the engine loop has returned.

        No error ends the thread (it would leave the worker alive but deaf, still heartbeating its calls):
        after a failure it waits, then re-reads the entries already delivered to it, so one that was read but
        not admitted (the database was down) is admitted then."""
        next_claim = time.monotonic() + self.claim_interval_s()
        reread_own = False
        while not stopped.is_set():
            try:
                if time.monotonic() >= next_claim:
                    next_claim = time.monotonic() + self.claim_interval_s()
                    self._heartbeat_and_claim(claim=not stopping.is_set())
                if stopping.is_set():
                    stopped.wait(max(0.0, next_claim - time.monotonic()))
                    continue
                if reread_own:
                    self._read_and_admit("0", block_ms=None)
                    reread_own = False
                self._read_and_admit(">", block_ms=max(1, min(500, int(self.claim_interval_s() * 1000))))
            except Exception as exc:
                if group_lost(exc):
                    self._recreate_group()
                    continue
                log.exception("stream intake failed; retrying in 1 s")
                connection.close()  # a broken connection is replaced at the next query
                reread_own = True
                stopped.wait(1.0)
        connection.close()  # this thread's own database connection

    def _recreate_group(self) -> None:
        """Redis came back without the stream (restarted without persistence, flushed): create the group again
        and put back, from the database, every call the lost stream held. Until both succeed the next read
        fails the same way and lands here again."""
        log.warning("the inference stream's consumer group is gone (Redis restarted empty?): creating it again")
        try:
            self.ensure_group()
            calls_restream_if_lost(stream=self.opts.stream)
        except Exception:
            log.exception("recreating the stream's consumer group failed; retrying in 1 s")
            time.sleep(1.0)

    def _read_and_admit(self, start: str, *, block_ms: int | None) -> None:
        """Admit entries from the stream: ">" new ones, "0" those already delivered to this consumer."""
        count = self.opts.read_count if start == ">" else 10_000  # a re-read takes every entry still pending
        reply = self.redis.xreadgroup(
            self.opts.group, self.opts.consumer, {self.opts.stream: start}, count=count, block=block_ms,
        )
        for _, entries in reply or []:
            self.admit(entries)

    def _heartbeat_and_claim(self, *, claim: bool) -> None:
        try:
            self.heartbeat()
            taken = self.claim_idle() if claim else 0
        except redis.RedisError:
            log.warning("stream heartbeat/claim failed; retrying", exc_info=True)
            return
        if taken:
            log.info("took over %d stream entries left by a dead worker", taken)

    # --- admission -----------------------------------------------------------------------------------------
    def admit(self, entries: list) -> int:
        """Hand the calls that stream entries name to the engine, as the database has them; the entry's own level
        and length only stand in for what the call's still uncommitted triage will store. Entries of calls
        already final, or deleted, are acknowledged at once."""
        parsed: list[tuple[str, StreamEntry]] = []
        for entry_id, raw in entries:
            if not raw:
                continue
            entry = StreamEntry.from_fields(raw)
            if entry is None:
                # Not ours to interpret: acknowledged, so it neither blocks the intake nor crashes a restart.
                log.error("malformed stream entry %s acknowledged and skipped: %r", text(entry_id), raw)
                self.redis.xack(self.opts.stream, self.opts.group, text(entry_id))
                continue
            parsed.append((text(entry_id), entry))
        if not parsed:
            return 0
        close_old_connections()
        current = calls_generation_input(call_ids=[entry.call_id for _, entry in parsed],
                                         brief_levels=self.brief_levels())
        admitted = 0
        for entry_id, entry in parsed:
            call_id = entry.call_id
            call = current.get(call_id)
            if call is None:
                self.redis.xack(self.opts.stream, self.opts.group, entry_id)
                continue
            with self._lock:
                seen = entry_id in self._entries[call_id]  # delivered again to this worker (a re-read)
                live = request_id(call_id) in self.engine.sequences
                if not seen:
                    self._entries[call_id].append(entry_id)
            if seen or live:
                continue  # the call is in the engine: this entry is acknowledged with it
            try:
                self.add_to_engine(call_id, call, entry)
            except Exception:
                with self._lock:  # not admitted: the re-read after this failure must not skip it
                    self._entries[call_id].remove(entry_id)
                raise
            admitted += 1
        self._wake()
        return admitted

    def add_to_engine(self, call_id: int, call: GenerationInput, entry: StreamEntry | None = None) -> None:
        """Admit the call as the database has it; an entry's level and length stand in while its triage is not
        committed yet (a call re-admitted without an entry has been triaged)."""
        # Held to its plan while generating where the executor enforces it; elsewhere the stream guard holds it.
        read_out = self.guidance.read_out(call.plan) if self.engine.constrains_read_out else None
        self.engine.add_request(
            request_id(call_id), call.prompt, level=call.level or (entry or StreamEntry).level,
            tier=call.tier or None,
            predicted_output_tokens=call.predicted_output_tokens
            or (entry or StreamEntry).predicted_output_tokens,
            arrival_s=call.accepted_at_s,
            read_out=read_out,
            client=call.client,
        )
        self.guidance.admitted(request_id(call_id), call.plan, call.generation)
        if call.brief:
            self.on_brief(call_id, call)

    def holds(self, call_id: int) -> bool:
        """Whether a stream entry of the call is this worker's, not yet acknowledged."""
        with self._lock:
            return bool(self._entries.get(call_id))

    def take_entries(self, call_ids: list[int]) -> list[str]:
        """The entries of calls that are done here (not in the engine any more), forgotten once taken."""
        ids: list[str] = []
        with self._lock:
            for call_id in call_ids:
                if request_id(call_id) in self.engine.sequences:
                    continue  # still generating (e.g. a transition of a running call); not done yet
                ids.extend(self._entries.pop(call_id, []))
        return ids
