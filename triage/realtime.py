"""Side effects towards browsers: the dashboard event stream and the per-call token streams.

Group sends are at-most-once and silently dropped when a channel is full (docs/architecture.md §2b), so the
dashboard protocol is Zulip's: a snapshot carrying a sequence number, then events each carrying the
next sequence number; a client that sees a gap, reconnects or receives ``resync`` asks for a fresh
snapshot. Nothing a browser shows depends on every group message arriving.

Contracts (the lead relays these; other processes write, the web process reads)
------------------------------------------------------------------------------
Services (any process: web, Celery, inference worker)
    call ``call_changed_on_commit(call_id)`` inside the transaction of every change to a call that
    the board shows (status, level, tier, preemption count, acknowledged/closed). It only adds the
    id to a Redis set once the transaction commits (O(1), no event loop needed); the throttled
    publisher (``triage.board_feed``) turns the set into events.

Inference worker, per generated token (``publish_tokens`` does both steps for you)
    1. ``XADD triage:tokens:<call_id> * index <i> text <t>`` — the replay log, written first;
       ``index`` counts from 0 without gaps for the call's output.
    2. ``group_send("call.<call_id>", {"type": "call.token", "index": i, "text": t})``.
    When the stream guard finds a sentence off protocol (``publish_guidance_replaced``):
    ``XADD triage:tokens:<call_id> * replace <the protocol's own text>`` and ``group_send(..., {"type":
    "call.guidance", "text", "off_protocol": true})``: from then on the call shows that text, not the model's.
    When a call's guidance is regenerated (a protocol switch; ``publish_guidance_restart``):
    ``XADD triage:tokens:<call_id> * restart 1`` and ``{"type": "call.restart"}``: indices count from 0 again.
    When a call's generation ends (done, failed or cancelled; ``publish_call_done``):
    ``XADD triage:tokens:<call_id> * done 1 status <status>``, ``EXPIRE`` the stream
    (``TOKEN_STREAM_TTL_S``; ``Call.guidance`` in the database is the record after that) and
    ``group_send("call.<call_id>", {"type": "call.done", "status": <status>})``.

Inference worker, engine metrics (at most a few times per second)
    ``HSET triage:engine:metrics`` with fields ``kv_used_blocks``, ``kv_capacity_blocks``,
    ``kv_use`` (0..1), ``tokens_per_s``, ``running``, ``waiting``, ``preemptions_total``
    (a counter since start) and ``updated_at`` (Unix seconds). The board reads it; values older
    than ``ENGINE_METRICS_STALE_S`` are shown as "engine idle/offline".

Dashboard socket ``ws/dashboard/`` (server → browser JSON; the types and their fields: ``triage.contracts``)
    ``{"type": "snapshot", "seq", "server_time", "calls": [call…], "tiers": [tier…],
       "aging_enabled", "metrics", "metrics_history": [metrics…]}``
    ``{"type": "call.updated", "seq", "call": call}`` — full state of one call (idempotent);
       ``call["live"]`` false means: drop it from the board (closed, cancelled, …)
    ``{"type": "call.removed", "seq", "call_id"}`` — the row no longer exists
    ``{"type": "metrics", "seq", "metrics": metrics}`` — about once a second
    ``{"type": "resync", "seq", "reason"}`` — too much changed at once (a "storm"): fetch a snapshot
    browser → server: ``{"type": "snapshot.request"}``.
    The call and metrics shapes are built by ``triage.selectors.queue``. A call's ``effective_level`` (the
    level the queue orders it by) and its ``level_changes`` (``[{"at", "level"}…]``, each later time it
    improves) come from the scheduler's aging; the board looks them up and never computes aging itself.

Call socket ``ws/calls/<id>/`` (server → browser JSON)
    ``{"type": "replay", "text", "index", "done", "off_protocol"}`` once on connect: everything generated so
    far (``index`` is the last token's index, -1 for none; with ``off_protocol``, ``text`` is the protocol's
    own), then ``{"type": "token", "index", "text"}`` per token, ``{"type": "guidance", "text",
    "off_protocol": true}`` when the guard replaces the text, ``{"type": "restart"}`` when it is regenerated,
    and ``{"type": "done", "status"}``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass

import redis
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

# The inference worker writes the engine metrics through this module's name for the key.
from triage.call_status import CallStatus
from triage.redis_clients import redis_text_client

logger = logging.getLogger(__name__)

DASHBOARD_GROUP = "dashboard"
SEQ_KEY = "triage:board:seq"
DIRTY_KEY = "triage:board:dirty"
FLUSH_LOCK_KEY = "triage:board:flush-lock"
STORM_COOLDOWN_KEY = "triage:board:storm-cooldown"
METRICS_DUE_KEY = "triage:board:metrics-due"
METRICS_HISTORY_KEY = "triage:board:metrics-history"

STORM_THRESHOLD = 25  # more dirty calls than this in one flush: send one resync instead
STORM_COOLDOWN_S = 1.0  # at most one resync a second, however long the storm lasts
METRICS_INTERVAL_S = 1.0
METRICS_HISTORY_POINTS = 120
TOKEN_STREAM_TTL_S = 3600


def call_group(call_id: int) -> str:
    return f"call.{call_id}"


def token_stream_key(call_id: int) -> str:
    return f"triage:tokens:{call_id}"


# --- marking changes -------------------------------------------------------------------------------


def call_changed_on_commit(call_id: int) -> None:
    """Tell dashboards that a call changed, once the current transaction commits."""
    transaction.on_commit(lambda: mark_calls_dirty([call_id]))


def mark_calls_dirty(call_ids: Iterable[int]) -> None:
    """Queue calls for the next coalesced broadcast. Repeated marks of one call cost one event."""
    ids = [int(i) for i in call_ids]
    if not ids:
        return
    try:
        redis_text_client().sadd(DIRTY_KEY, *ids)
    except redis.RedisError:
        # The change is committed; browsers catch up on their next snapshot. Never fail a write for this.
        logger.warning("could not mark calls %s dirty for the dashboard", ids[:10], exc_info=True)


def current_seq() -> int:
    return int(redis_text_client().get(SEQ_KEY) or 0)


# --- board state in Redis ---------------------------------------------------------------------------


def metrics_history() -> list[dict]:
    return [json.loads(p) for p in redis_text_client().lrange(METRICS_HISTORY_KEY, 0, -1)]


# --- per-call token streams (helpers for the inference worker) -------------------------------------


def publish_tokens(tokens: Iterable[tuple[int, int, str]]) -> None:
    """Append ``(call_id, index, text)`` tokens to their replay logs, then send them to the call groups."""
    tokens = list(tokens)
    if not tokens:
        return
    pipe = redis_text_client().pipeline(transaction=False)
    for call_id, index, text in tokens:
        pipe.xadd(token_stream_key(call_id), {"index": index, "text": text})
    pipe.execute()
    _group_send_many_groups(
        [(call_group(c), {"type": "call.token", "index": i, "text": t}) for c, i, t in tokens]
    )


def publish_call_done(call_id: int, status: str = CallStatus.DONE) -> None:
    """Close a call's token stream: replay shows it finished, and watchers get ``done``."""
    key = token_stream_key(call_id)
    pipe = redis_text_client().pipeline(transaction=False)
    pipe.xadd(key, {"done": 1, "status": status})
    pipe.expire(key, TOKEN_STREAM_TTL_S)
    pipe.execute()
    _group_send_many_groups([(call_group(call_id), {"type": "call.done", "status": status})])


def publish_guidance_replaced(call_id: int, text: str) -> None:
    """The stream guard found a sentence off protocol: the call shows ``text`` (the protocol's own) instead."""
    redis_text_client().xadd(token_stream_key(call_id), {"replace": text})
    _group_send_many_groups([(call_group(call_id), {"type": "call.guidance", "text": text, "off_protocol": True})])


def publish_guidance_restart(call_id: int) -> None:
    """The call's guidance is generated again from the start (its protocol was switched)."""
    redis_text_client().xadd(token_stream_key(call_id), {"restart": 1})
    _group_send_many_groups([(call_group(call_id), {"type": "call.restart"})])


@dataclass
class TokenReplay:
    text: str
    last_index: int
    done: bool
    status: str | None
    off_protocol: bool = False  # ``text`` is the protocol's own: the guard replaced what the model said


def read_token_replay(call_id: int, *, after_index: int = -1) -> TokenReplay:
    """The guidance so far for a call (the tokens after ``after_index`` of its latest generation), from its
    replay log; after a guard's replacement, the replacement and no later tokens."""
    return token_replay_from_entries(redis_text_client().xrange(token_stream_key(call_id)), after_index=after_index)


def token_replay_from_entries(
    entries: Iterable[tuple[str, dict[str, str]]], *, after_index: int = -1
) -> TokenReplay:
    """``read_token_replay`` over entries already read (the SSE endpoint reads them with an async client)."""
    parts: list[str] = []
    last, done, status, replaced = after_index, False, None, False
    for _id, fields in entries:
        if "restart" in fields:
            parts, last, done, status, replaced = [], -1, False, None, False
        elif "replace" in fields:
            parts, replaced = [fields["replace"]], True
        elif "done" in fields:
            done, status = True, fields.get("status") or CallStatus.DONE
        elif int(fields.get("index", -1)) > last:
            last = int(fields["index"])
            if not replaced:
                parts.append(fields.get("text", ""))
    return TokenReplay(text="".join(parts), last_index=last, done=done, status=status, off_protocol=replaced)


# --- sending ---------------------------------------------------------------------------------------


def group_send_many(group: str, messages: list[dict]) -> None:
    _group_send_many_groups([(group, m) for m in messages])


def _group_send_many_groups(items: list[tuple[str, dict]]) -> None:
    layer = get_channel_layer()
    if layer is None or not items:
        return

    async def send_all() -> None:
        for group, message in items:
            await layer.group_send(group, message)

    try:
        async_to_sync(send_all)()
    except Exception:  # at-most-once by contract; clients resync
        logger.warning("group send failed (%d messages)", len(items), exc_info=True)
