"""Channels consumers: the dashboard feed and the per-call guidance stream.

Both use session authentication (``AuthMiddlewareStack``). A socket without a user, or whose user
has no dashboard role, is accepted and immediately closed with an application close code, so the
browser can tell "log in again" (4401) and "not allowed" (4403) from a network failure and stops
retrying. Message shapes: see ``triage.realtime``.
"""

from __future__ import annotations

import asyncio
import time

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from triage import board_feed, realtime
from triage.contracts import (
    BOARD_REQUESTS,
    done_event,
    guidance_event,
    replay_event,
    restart_event,
    snapshot_event,
    token_event,
)
from triage.models import FINAL_STATUSES, Call, CallStatus
from triage.roles import has_any_role
from triage.selectors.queue import queue_snapshot

CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404
SNAPSHOT_MIN_INTERVAL_S = 0.5  # one client cannot make the server rebuild snapshots in a loop


@database_sync_to_async
def _may_watch(user: object) -> bool:
    return has_any_role(user)


async def _refuse_unless_allowed(consumer: AsyncJsonWebsocketConsumer) -> bool:
    """Close the socket (accepted first, so the close code reaches the browser) unless allowed."""
    user = consumer.scope.get("user")
    if user is None or not user.is_authenticated:
        code = CLOSE_UNAUTHENTICATED
    elif not await _may_watch(user):
        code = CLOSE_FORBIDDEN
    else:
        return False
    await consumer.accept()
    await consumer.close(code=code)
    return True


@database_sync_to_async
def _snapshot_with_seq() -> dict:
    # The sequence number first, then the rows: see board_feed.flush_dashboard for why.
    seq = realtime.current_seq()
    snapshot = queue_snapshot()
    return snapshot_event(seq=seq, snapshot=snapshot, metrics_history=realtime.metrics_history())


class DashboardConsumer(AsyncJsonWebsocketConsumer):
    """``ws/dashboard/``: snapshot on connect, then sequenced ``board.event`` messages."""

    joined = False
    last_snapshot_at = 0.0

    async def connect(self) -> None:
        if await _refuse_unless_allowed(self):
            return
        # Join before the snapshot's sequence number is read, so no event after it can be missed.
        await self.channel_layer.group_add(realtime.DASHBOARD_GROUP, self.channel_name)
        self.joined = True
        await self.accept()
        await board_feed.publisher.acquire()
        await self.send_snapshot()

    async def disconnect(self, code: int) -> None:
        if self.joined:
            self.joined = False
            await self.channel_layer.group_discard(realtime.DASHBOARD_GROUP, self.channel_name)
            await board_feed.publisher.release()

    async def receive_json(self, content: dict, **kwargs: object) -> None:
        if isinstance(content, dict) and content.get("type") in BOARD_REQUESTS:
            wait = SNAPSHOT_MIN_INTERVAL_S - (time.monotonic() - self.last_snapshot_at)
            if wait > 0:
                await asyncio.sleep(wait)
            await self.send_snapshot()

    async def send_snapshot(self) -> None:
        self.last_snapshot_at = time.monotonic()
        await self.send_json(await _snapshot_with_seq())

    async def board_event(self, message: dict) -> None:
        await self.send_json(message["event"])


@database_sync_to_async
def _call_guidance(call_id: int) -> Call | None:
    return Call.objects.filter(pk=call_id).only("status", "guidance", "off_protocol_sentences").first()


@database_sync_to_async
def _replay(call_id: int, after_index: int) -> realtime.TokenReplay:
    return realtime.read_token_replay(call_id, after_index=after_index)


class CallConsumer(AsyncJsonWebsocketConsumer):
    """``ws/calls/<id>/``: the guidance generated so far, then each new token as it is generated."""

    call_id = 0
    group = ""
    last_index = -1
    replaced = False  # the guard replaced the text: later tokens are not shown

    async def connect(self) -> None:
        if await _refuse_unless_allowed(self):
            return
        self.call_id = int(self.scope["url_route"]["kwargs"]["call_id"])
        call = await _call_guidance(self.call_id)
        if call is None:
            await self.accept()
            await self.close(code=CLOSE_NOT_FOUND)
            return
        # Join first, then read the replay log: a token published in between arrives both ways
        # and the index check drops the duplicate.
        self.group = realtime.call_group(self.call_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        replay = await _replay(self.call_id, -1)
        final = call.status in FINAL_STATUSES
        if replay.last_index < 0 and not replay.done and call.guidance:
            # The replay log has expired (or this call predates it): the database has the text.
            await self.send_json(replay_event(text=call.guidance, index=-1, done=final,
                                              off_protocol=call.off_protocol_sentences > 0))
            return
        self.last_index = replay.last_index
        self.replaced = replay.off_protocol
        await self.send_json(replay_event(text=replay.text, index=replay.last_index, done=replay.done or final,
                                          off_protocol=replay.off_protocol))

    async def disconnect(self, code: int) -> None:
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)
            self.group = ""

    async def call_token(self, message: dict) -> None:
        index = int(message.get("index", -1))
        if index <= self.last_index or self.replaced:
            self.last_index = max(self.last_index, index)
            return  # already sent in the replay, or replaced by the protocol's text
        if index > self.last_index + 1:
            # A dropped group message: fill the hole from the replay log, which is written first.
            missing = await _replay(self.call_id, self.last_index)
            if missing.off_protocol:
                await self.call_guidance({"text": missing.text})
                return
            if missing.last_index >= index:
                self.last_index = missing.last_index
                await self.send_json(token_event(index=missing.last_index, text=missing.text))
                return
        self.last_index = index
        await self.send_json(token_event(index=index, text=message.get("text", "")))

    async def call_guidance(self, message: dict) -> None:
        self.replaced = True
        await self.send_json(guidance_event(message.get("text", "")))

    async def call_restart(self, message: dict) -> None:
        self.last_index, self.replaced = -1, False
        await self.send_json(restart_event())

    async def call_done(self, message: dict) -> None:
        missing = await _replay(self.call_id, self.last_index)
        if missing.text and not self.replaced:
            self.last_index = missing.last_index
            await self.send_json(token_event(index=missing.last_index, text=missing.text))
        await self.send_json(done_event(message.get("status", CallStatus.DONE)))
