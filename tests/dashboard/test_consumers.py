"""The dashboard and call sockets over the real Redis channel layer, through the real ASGI stack."""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from config.asgi import application
from tests.dashboard.conftest import session_cookie
from triage.board_feed import flush_dashboard
from triage.contracts import BOARD_EVENTS, CALL_EVENTS, check_event
from triage.models import CallStatus
from triage.realtime import (
    STORM_THRESHOLD,
    mark_calls_dirty,
    publish_call_done,
    publish_guidance_replaced,
    publish_guidance_restart,
    publish_tokens,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("board_redis", "redis_conn")]


class SchemaCheckedCommunicator(WebsocketCommunicator):
    """Holds every message the server sends to its event schema (``triage.contracts``), as the board expects."""

    def __init__(self, path: str, headers: list[tuple[bytes, bytes]]) -> None:
        super().__init__(application, path, headers=headers)
        self.schema = BOARD_EVENTS if "/dashboard/" in path else CALL_EVENTS

    async def receive_json_from(self, timeout: float = 1) -> dict:
        message = await super().receive_json_from(timeout)
        check_event(message, self.schema)
        return message


def communicator(path: str, cookie: str | None) -> WebsocketCommunicator:
    headers = [(b"origin", b"http://localhost"), (b"host", b"localhost")]
    if cookie:
        headers.append((b"cookie", f"sessionid={cookie}".encode()))
    return SchemaCheckedCommunicator(path, headers)


async def receive_all(comm: WebsocketCommunicator, quiet_s: float = 0.4) -> list[dict]:
    """Every message until the socket has been quiet for ``quiet_s``."""
    messages = []
    # receive_nothing, not a timed-out receive: a receive timeout cancels the application
    while not await comm.receive_nothing(timeout=quiet_s):
        messages.append(await comm.receive_json_from(timeout=1))
    return messages


def apply_event(calls: dict[int, dict], event: dict) -> None:
    """The board's rule (static/js/board.js ``handle``/``applyCall``), in Python."""
    if event["type"] == "call.updated":
        if event["call"]["live"]:
            calls[event["call"]["id"]] = event["call"]
        else:
            calls.pop(event["call"]["id"], None)
    elif event["type"] == "call.removed":
        calls.pop(event["call_id"], None)


flush = database_sync_to_async(flush_dashboard)


# --- authentication ----------------------------------------------------------------------------------


async def test_dashboard_socket_without_a_session_is_closed_with_4401():
    comm = communicator("/ws/dashboard/", None)
    connected, _ = await comm.connect()
    assert connected
    closed = await comm.receive_output(timeout=2)
    assert closed == {"type": "websocket.close", "code": 4401}
    await comm.disconnect()


async def test_dashboard_socket_of_a_user_without_a_role_is_closed_with_4403(make_user):
    cookie = await database_sync_to_async(lambda: session_cookie(make_user("nobody")))()
    comm = communicator("/ws/dashboard/", cookie)
    await comm.connect()
    assert await comm.receive_output(timeout=2) == {"type": "websocket.close", "code": 4403}
    await comm.disconnect()


async def test_call_socket_without_a_session_is_closed_with_4401(make_call):
    call = await database_sync_to_async(make_call)(2)
    comm = communicator(f"/ws/calls/{call.pk}/", None)
    await comm.connect()
    assert await comm.receive_output(timeout=2) == {"type": "websocket.close", "code": 4401}
    await comm.disconnect()


async def test_socket_from_a_foreign_origin_is_refused(dispatcher_cookie):
    comm = WebsocketCommunicator(
        application, "/ws/dashboard/",
        headers=[(b"origin", b"http://evil.example"), (b"cookie", f"sessionid={dispatcher_cookie}".encode())],
    )
    connected, _ = await comm.connect()
    assert not connected


# --- snapshot and sequenced events -------------------------------------------------------------------------


@pytest.mark.usefixtures("manual_flush")
async def test_snapshot_on_connect_lists_live_calls_most_urgent_first(make_call, dispatcher_cookie):
    make = database_sync_to_async(make_call)
    low = await make(4)
    urgent = await make(1)
    mid = await make(3, CallStatus.DECODING)
    await flush()  # the creation events go out before we connect
    comm = communicator("/ws/dashboard/", dispatcher_cookie)
    assert (await comm.connect())[0]
    snapshot = await comm.receive_json_from(timeout=3)
    assert snapshot["type"] == "snapshot"
    assert isinstance(snapshot["seq"], int) and snapshot["seq"] > 0
    assert [c["id"] for c in snapshot["calls"]] == [urgent.pk, mid.pk, low.pk]
    assert snapshot["calls"][1]["status"] == "decoding"
    assert {t["name"] for t in snapshot["tiers"]} >= {"Immediate", "Non-urgent"}
    assert "waiting_s" in snapshot["metrics"]
    await comm.disconnect()


@pytest.mark.usefixtures("manual_flush")
async def test_events_carry_consecutive_sequence_numbers_after_the_snapshot(make_call, dispatcher_cookie):
    comm = communicator("/ws/dashboard/", dispatcher_cookie)
    await comm.connect()
    snapshot = await comm.receive_json_from(timeout=3)
    call = await database_sync_to_async(make_call)(2)
    await flush()
    events = await receive_all(comm)
    assert [e["seq"] for e in events] == list(range(snapshot["seq"] + 1, snapshot["seq"] + 1 + len(events)))
    updates = [e for e in events if e["type"] == "call.updated"]
    assert updates[-1]["call"]["id"] == call.pk and updates[-1]["call"]["level"] == 2
    await comm.disconnect()


@pytest.mark.usefixtures("manual_flush")
async def test_snapshot_plus_applied_events_equals_a_fresh_snapshot(make_call, dispatcher, dispatcher_cookie):
    from triage.services.board import call_acknowledge, call_close
    from triage.services.calls import call_cancel, call_transition
    from triage.services.overrides import call_override_level

    make = database_sync_to_async(make_call)
    queued, decoding, to_finish, to_cancel = await make(4), await make(3, "decoding"), await make(2, "decoding"), await make(5)
    await flush()
    comm = communicator("/ws/dashboard/", dispatcher_cookie)
    await comm.connect()
    snapshot = await comm.receive_json_from(timeout=3)
    state = {c["id"]: c for c in snapshot["calls"]}
    seq = snapshot["seq"]

    def changes() -> None:
        call_override_level(call=queued, level=1, reason="caller now unresponsive", user=dispatcher)
        call_transition(call=decoding, to_status="preempted", actor="system:inference")
        call_transition(call=to_finish, to_status="done", actor="system:inference", updates={"guidance": "ok"})
        call_acknowledge(call=to_finish, user=dispatcher)
        call_close(call=to_finish, user=dispatcher, outcome="Ambulance dispatched")
        call_cancel(call=to_cancel, actor=dispatcher, reason="duplicate")
        make_call(2)  # a new call (triaged in-process: a Celery worker elsewhere in the session skips it)

    await database_sync_to_async(changes)()
    for _ in range(3):  # several flushes, as the publisher would do
        await flush()
    for event in await receive_all(comm):
        assert event["seq"] == seq + 1, "no gaps on a healthy connection"
        seq = event["seq"]
        apply_event(state, event)

    await comm.send_json_to({"type": "snapshot.request"})
    fresh = await comm.receive_json_from(timeout=3)
    assert fresh["type"] == "snapshot" and fresh["seq"] >= seq
    assert state == {c["id"]: c for c in fresh["calls"]}
    assert to_finish.pk not in state and to_cancel.pk not in state  # closed and cancelled left the board
    assert state[queued.pk]["level"] == 1 and state[queued.pk]["overridden"]
    assert fresh["calls"][0]["id"] == queued.pk  # the override moved it to the top
    await comm.disconnect()


@pytest.mark.usefixtures("manual_flush")
async def test_a_burst_of_changes_becomes_one_resync_hint_not_one_event_each(make_call, dispatcher_cookie):
    comm = communicator("/ws/dashboard/", dispatcher_cookie)
    await comm.connect()
    await comm.receive_json_from(timeout=3)
    await database_sync_to_async(mark_calls_dirty)(range(1, 1001))  # a 1,000-call burst
    await flush()
    await flush()  # still within the storm cool-down: nothing more
    events = await receive_all(comm)
    kinds = [e["type"] for e in events]
    assert kinds.count("resync") == 1
    assert "call.updated" not in kinds
    assert len(events) <= 2  # the resync and at most one metrics event
    await comm.disconnect()


@pytest.mark.usefixtures("manual_flush")
async def test_many_changes_to_one_call_between_flushes_coalesce_into_one_event(make_call, dispatcher_cookie):
    call = await database_sync_to_async(make_call)(3)
    await flush()
    comm = communicator("/ws/dashboard/", dispatcher_cookie)
    await comm.connect()
    await comm.receive_json_from(timeout=3)
    for _ in range(50):
        await database_sync_to_async(mark_calls_dirty)([call.pk])
    await flush()
    updates = [e for e in await receive_all(comm) if e["type"] == "call.updated"]
    assert [u["call"]["id"] for u in updates] == [call.pk]
    await comm.disconnect()


def test_storm_threshold_is_a_few_dozen_calls_per_flush():
    assert 10 <= STORM_THRESHOLD <= 100


async def test_the_background_publisher_delivers_changes_within_a_second(make_call, dispatcher_cookie):
    comm = communicator("/ws/dashboard/", dispatcher_cookie)
    await comm.connect()
    await comm.receive_json_from(timeout=3)
    call = await database_sync_to_async(make_call)(1)
    seen = []
    deadline = asyncio.get_running_loop().time() + 3
    while asyncio.get_running_loop().time() < deadline:
        event = await comm.receive_json_from(timeout=3)
        seen.append(event)
        if event["type"] == "call.updated" and event["call"]["id"] == call.pk and event["call"]["status"] == "queued":
            break
    else:
        pytest.fail(f"no update for call {call.pk}: {seen}")
    await comm.disconnect()


# --- the per-call token stream -------------------------------------------------------------------------


async def test_call_socket_replays_generated_tokens_then_streams_new_ones(make_call, dispatcher_cookie):
    call = await database_sync_to_async(make_call)(2, "decoding")
    publish = database_sync_to_async(publish_tokens)
    await publish([(call.pk, 0, "Check "), (call.pk, 1, "breathing")])
    comm = communicator(f"/ws/calls/{call.pk}/", dispatcher_cookie)
    await comm.connect()
    replay = await comm.receive_json_from(timeout=3)
    assert replay == {"type": "replay", "text": "Check breathing", "index": 1, "done": False, "off_protocol": False}
    await publish([(call.pk, 2, " now.")])
    assert await comm.receive_json_from(timeout=3) == {"type": "token", "index": 2, "text": " now."}
    await database_sync_to_async(publish_call_done)(call.pk)
    assert await comm.receive_json_from(timeout=3) == {"type": "done", "status": "done"}
    await comm.disconnect()


async def test_call_socket_fills_a_dropped_token_from_the_replay_log(make_call, dispatcher_cookie):
    from triage.realtime import token_stream_key
    from triage.redis_clients import redis_text_client

    call = await database_sync_to_async(make_call)(2, "decoding")
    comm = communicator(f"/ws/calls/{call.pk}/", dispatcher_cookie)
    await comm.connect()
    assert (await comm.receive_json_from(timeout=3))["text"] == ""
    # token 0 reaches the log but its group message is lost; token 1 arrives normally
    await database_sync_to_async(lambda: redis_text_client().xadd(token_stream_key(call.pk), {"index": 0, "text": "Keep "}))()
    await database_sync_to_async(publish_tokens)([(call.pk, 1, "calm")])
    assert await comm.receive_json_from(timeout=3) == {"type": "token", "index": 1, "text": "Keep calm"}
    await comm.disconnect()


async def test_call_socket_replays_stored_guidance_when_the_log_has_expired(make_call, dispatcher_cookie):
    call = await database_sync_to_async(make_call)(3, "done")
    comm = communicator(f"/ws/calls/{call.pk}/", dispatcher_cookie)
    await comm.connect()
    assert await comm.receive_json_from(timeout=3) == {
        "type": "replay", "text": "Check breathing.", "index": -1, "done": True, "off_protocol": False,
    }
    await comm.disconnect()


async def test_an_off_protocol_call_shows_the_protocols_text_and_no_more_model_tokens(make_call, dispatcher_cookie):
    call = await database_sync_to_async(make_call)(2, "decoding")
    publish = database_sync_to_async(publish_tokens)
    await publish([(call.pk, 0, "Keep him warm. "), (call.pk, 1, "Give him whisky.")])
    comm = communicator(f"/ws/calls/{call.pk}/", dispatcher_cookie)
    await comm.connect()
    assert (await comm.receive_json_from(timeout=3))["text"] == "Keep him warm. Give him whisky."
    await database_sync_to_async(publish_guidance_replaced)(call.pk, "Keep him warm. Call back if he worsens.")
    assert await comm.receive_json_from(timeout=3) == {
        "type": "guidance", "text": "Keep him warm. Call back if he worsens.", "off_protocol": True,
    }
    await publish([(call.pk, 2, " More whisky.")])
    await database_sync_to_async(publish_call_done)(call.pk)
    assert await comm.receive_json_from(timeout=3) == {"type": "done", "status": "done"}  # no token in between
    await comm.disconnect()
    late = communicator(f"/ws/calls/{call.pk}/", dispatcher_cookie)  # a board that opens the call afterwards
    await late.connect()
    replay = await late.receive_json_from(timeout=3)
    assert (replay["text"], replay["off_protocol"], replay["done"]) == ("Keep him warm. Call back if he worsens.", True, True)
    await late.disconnect()


async def test_a_regenerated_call_streams_from_the_start_again(make_call, dispatcher_cookie):
    call = await database_sync_to_async(make_call)(2, "decoding")
    publish = database_sync_to_async(publish_tokens)
    await publish([(call.pk, 0, "Old "), (call.pk, 1, "protocol.")])
    comm = communicator(f"/ws/calls/{call.pk}/", dispatcher_cookie)
    await comm.connect()
    assert (await comm.receive_json_from(timeout=3))["index"] == 1
    await database_sync_to_async(publish_guidance_restart)(call.pk)
    assert await comm.receive_json_from(timeout=3) == {"type": "restart"}
    await publish([(call.pk, 0, "New.")])
    assert await comm.receive_json_from(timeout=3) == {"type": "token", "index": 0, "text": "New."}
    await comm.disconnect()
    late = communicator(f"/ws/calls/{call.pk}/", dispatcher_cookie)
    await late.connect()
    assert (await late.receive_json_from(timeout=3))["text"] == "New."
    await late.disconnect()


async def test_call_socket_for_an_unknown_call_is_closed_with_4404(dispatcher_cookie):
    comm = communicator("/ws/calls/987654/", dispatcher_cookie)
    await comm.connect()
    assert await comm.receive_output(timeout=2) == {"type": "websocket.close", "code": 4404}
    await comm.disconnect()
