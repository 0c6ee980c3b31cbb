"""The dashboard feed: turns the calls marked changed (``realtime.call_changed_on_commit``) into sequenced board
events, a few times a second, in the web process. It reads the board's rows (``selectors.queue``) and publishes
through ``realtime``, so it sits above both; the protocol is described in ``triage.realtime``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from dataclasses import dataclass

from channels.db import database_sync_to_async

from triage.contracts import call_removed_event, call_updated_event, metrics_event, resync_event
from triage.realtime import (
    DASHBOARD_GROUP,
    DIRTY_KEY,
    FLUSH_LOCK_KEY,
    METRICS_DUE_KEY,
    METRICS_HISTORY_KEY,
    METRICS_HISTORY_POINTS,
    METRICS_INTERVAL_S,
    SEQ_KEY,
    STORM_COOLDOWN_KEY,
    STORM_COOLDOWN_S,
    STORM_THRESHOLD,
    group_send_many,
)
from triage.redis_clients import redis_text_client
from triage.selectors.queue import board_metrics, call_states

logger = logging.getLogger(__name__)

FLUSH_INTERVAL_S = 0.25  # "a few per second"


@dataclass
class FlushResult:
    sent_updates: int = 0
    sent_resync: bool = False
    sent_metrics: bool = False
    skipped_locked: bool = False


def flush_dashboard(*, force_metrics: bool = False) -> FlushResult:
    """Turn the dirty set into sequenced dashboard events (one flush; the publisher calls it 4×/s).

    Ordering that keeps snapshot + events == fresh snapshot: rows are read from the database
    *before* the sequence number is taken, and a snapshot takes its sequence number *before* reading
    rows. So a snapshot whose seq covers an event holds data at least as new as that event, and an
    event newer than the snapshot's seq is applied on top of it; a change committed after our read
    re-marks the call dirty and goes out in a later flush.
    """
    r = redis_text_client()
    result = FlushResult()
    token = uuid.uuid4().hex
    if not r.set(FLUSH_LOCK_KEY, token, nx=True, px=5000):
        result.skipped_locked = True
        return result
    try:
        events: list[dict] = []
        dirty = r.scard(DIRTY_KEY)
        if dirty > STORM_THRESHOLD:
            # openwisp-style storm handling: one "fetch a snapshot" hint instead of N events.
            if r.set(STORM_COOLDOWN_KEY, "1", nx=True, px=int(STORM_COOLDOWN_S * 1000)):
                # Safe to drop the set: every change in it committed before this point, and the
                # snapshot each client now fetches is read after it.
                r.delete(DIRTY_KEY)
                events.append(resync_event(reason="storm", dirty=dirty))
                result.sent_resync = True
        elif dirty:
            ids = [int(i) for i in r.spop(DIRTY_KEY, dirty) or []]
            states = call_states(ids)
            for call_id in sorted(ids):
                if call_id in states:
                    events.append(call_updated_event(states[call_id]))
                else:
                    events.append(call_removed_event(call_id))
            result.sent_updates = len(events)
        if force_metrics or r.set(METRICS_DUE_KEY, "1", nx=True, px=int(METRICS_INTERVAL_S * 1000)):
            metrics = board_metrics()
            r.rpush(METRICS_HISTORY_KEY, json.dumps(metrics))
            r.ltrim(METRICS_HISTORY_KEY, -METRICS_HISTORY_POINTS, -1)
            events.append(metrics_event(metrics))
            result.sent_metrics = True
        if events:
            last = r.incrby(SEQ_KEY, len(events))
            for offset, event in enumerate(events):
                event["seq"] = last - len(events) + 1 + offset
            group_send_many(DASHBOARD_GROUP, [{"type": "board.event", "event": e} for e in events])
        return result
    finally:
        if r.get(FLUSH_LOCK_KEY) == token:  # not a lock another process took after ours expired
            r.delete(FLUSH_LOCK_KEY)


class DashboardPublisher:
    """Runs ``flush_dashboard`` every ``FLUSH_INTERVAL_S`` while this process has dashboard sockets.

    Lives in the web (daphne) process, started by the first dashboard consumer and stopped with the
    last one. Several web processes may run one each: the Redis lock makes one flush at a time.
    """

    def __init__(self, interval_s: float = FLUSH_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self._task: asyncio.Task | None = None
        self._users = 0

    async def acquire(self) -> None:
        self._users += 1
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self._task = loop.create_task(self._run(), name="dashboard-publisher")

    async def release(self) -> None:
        self._users = max(0, self._users - 1)
        if self._users == 0 and self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, RuntimeError):
                pass
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await database_sync_to_async(flush_dashboard)()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bad flush must not stop the board
                logger.exception("dashboard flush failed")


publisher = DashboardPublisher()
