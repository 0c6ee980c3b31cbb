"""A call's guidance as a sequence of events, read asynchronously from its replay log (``triage.realtime``).

The log ``triage:tokens:<call_id>`` is a Redis stream; its entry ids are the events' ids, so a client that
reconnects with the last id it saw gets exactly the entries after it (XREAD from that id). The events:

``replay``  everything generated so far, collapsed (``text``, ``index``: the last token's, ``done``,
            ``off_protocol``) — the first event of a fresh connection
``token``   one token (``index``, ``text``)
``guidance`` the stream guard replaced the text with the protocol's own (``text``, ``off_protocol``)
``restart`` the guidance is generated again from the start (a protocol switch): drop what was shown
``done``    the generation ended (``status``: done, failed or cancelled); the last event

Redis is read with ``redis.asyncio`` (XREAD BLOCK), so a waiting stream holds a connection but no thread.
While nothing arrives, the call's status is checked every ``keepalive_s``: a call that ended without a
``done`` entry (failed at triage, cancelled before generation) still ends its stream, and the caller gets a
``None`` to send a keep-alive with.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection
from redis import asyncio as aioredis

from triage.contracts import done_event, guidance_event, replay_event, restart_event, token_event
from triage.models import FINAL_STATUSES, Call, CallStatus
from triage.realtime import token_replay_from_entries, token_stream_key

STREAM_ID = re.compile(r"\d{1,20}-\d{1,20}")
START_ID = "0-0"  # "before any entry": the id of a replay with nothing in it yet
READ_TIMEOUT_MARGIN_S = 10.0  # a blocked XREAD answers after keepalive_s; past this margin Redis is away
XREAD_COUNT = 500


@dataclass(frozen=True)
class GuidanceEvent:
    """One server-sent event: a call event of ``triage.contracts`` (its type as the SSE event name)."""

    event: str
    data: dict[str, Any] = field(default_factory=dict)
    id: str | None = None  # the replay-log entry it comes from; None for one made from the database

    @classmethod
    def of(cls, call_event: dict[str, Any], id: str | None = None) -> GuidanceEvent:  # noqa: A002 - SSE's name
        data = dict(call_event)
        return cls(data.pop("type"), data, id=id)


def release_database_connection() -> None:
    """Give this thread's database connection back (to the web process's pool, DATABASE_POOL_MAX). A stream lasts
    as long as its call, and Django returns a request's connection only when its response ends: ten open streams
    held the whole pool, and the next request of the web process (a stream, the board) failed after the pool's
    timeout (measured: `demo --production-like` with 50 streams, tests/triage/test_demo_production_like.py)."""
    if not connection.in_atomic_block:
        connection.close()


@sync_to_async
def _final_call(call_id: int) -> Call | None:
    """The call if it has ended (done, failed, cancelled), else None; the connection goes back at once."""
    try:
        return (
            Call.objects.filter(pk=call_id, status__in=FINAL_STATUSES)
            .only("status", "guidance", "off_protocol_sentences").first()
        )
    finally:
        release_database_connection()


def _from_database(call: Call) -> list[GuidanceEvent]:
    # The replay log has expired (TOKEN_STREAM_TTL_S) or never existed: Call.guidance is the record.
    return [
        GuidanceEvent.of(replay_event(text=call.guidance, index=-1, done=True,
                                      off_protocol=call.off_protocol_sentences > 0)),
        GuidanceEvent.of(done_event(call.status)),
    ]


async def call_guidance_events(
    *, call_id: int, after_id: str | None = None, keepalive_s: float | None = None
) -> AsyncIterator[GuidanceEvent | None]:
    """The call's guidance events: a ``replay`` (or, with ``after_id``, only the entries after that id), then
    each new entry until ``done``. Yields ``None`` after each ``keepalive_s`` without news."""
    keepalive_s = keepalive_s if keepalive_s is not None else settings.TRIAGE["STREAM_KEEPALIVE_S"]
    key = token_stream_key(call_id)
    # redis-py 8 gives every read a 5 s socket timeout unless told otherwise: an XREAD blocked for the keep-alive
    # (15 s) failed at 5 s and the stream died silently for any call that waited that long for a token.
    conn = aioredis.Redis.from_url(settings.REDIS_URL, decode_responses=True,
                                   socket_timeout=keepalive_s + READ_TIMEOUT_MARGIN_S)
    try:
        if after_id is None:
            entries = await conn.xrange(key)
            cursor = entries[-1][0] if entries else START_ID
        else:
            # The state at the client's position (last index, replaced?) decides which later tokens count.
            entries = await conn.xrange(key, "-", after_id)
            cursor = after_id
        state = token_replay_from_entries(entries)
        if not await conn.exists(key):
            call = await _final_call(call_id)
            if call is not None:
                for event in _from_database(call):
                    yield event
                return
        if after_id is None:
            yield GuidanceEvent.of(replay_event(text=state.text, index=state.last_index, done=state.done,
                                                off_protocol=state.off_protocol), id=cursor)
            if state.done:
                yield GuidanceEvent.of(done_event(state.status), id=cursor)
                return
        last_index, replaced = state.last_index, state.off_protocol
        drained = False
        while True:
            read = await conn.xread({key: cursor}, count=XREAD_COUNT, block=None if drained else int(keepalive_s * 1000))
            batch = read[0][1] if read else []
            for entry_id, fields in batch:
                cursor = entry_id
                if "restart" in fields:
                    last_index, replaced = -1, False
                    yield GuidanceEvent.of(restart_event(), id=entry_id)
                elif "replace" in fields:
                    replaced = True
                    yield GuidanceEvent.of(guidance_event(fields["replace"]), id=entry_id)
                elif "done" in fields:
                    yield GuidanceEvent.of(done_event(fields.get("status") or CallStatus.DONE), id=entry_id)
                    return
                elif (index := int(fields.get("index", -1))) > last_index:
                    # a lower or equal index was sent already (a resent token); after a replacement the
                    # protocol's text stands and the model's tokens are not shown
                    last_index = index
                    if not replaced:
                        yield GuidanceEvent.of(token_event(index=index, text=fields.get("text", "")), id=entry_id)
            if batch:
                continue
            if drained:
                # Ended without a done entry, and nothing more came after one last non-blocking read.
                yield GuidanceEvent.of(done_event(call.status))
                return
            call = await _final_call(call_id)
            if call is not None:
                drained = True  # read what the worker may have appended just before its commit, then end
                continue
            yield None
    finally:
        await conn.aclose()
