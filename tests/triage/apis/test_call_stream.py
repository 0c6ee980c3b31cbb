"""GET /api/v1/calls/<id>/stream: Server-Sent Events over the real ASGI stack (Django's async test client, and
a real daphne process), with tokens published by triage.realtime's own publishers into the real Redis."""

from __future__ import annotations

import asyncio
import http.client
import json
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from django.db import connections
from django.test import AsyncClient
from rest_framework.test import APIClient

from tests.triage.factories import make_call
from triage import realtime
from triage.models import Call, CallStatus
from triage.services.calls import call_cancel

pytestmark = pytest.mark.usefixtures("redis_conn")


@dataclass
class Event:
    event: str
    data: dict
    id: str | None


def parse_events(text: str) -> tuple[list[Event], list[str], str]:
    """(events, comments, the unfinished rest) of text/event-stream ``text``."""
    events, comments = [], []
    *blocks, rest = text.split("\n\n")
    for block in blocks:
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            if line.startswith(":"):
                comments.append(line)
            elif line:
                name, _, value = line.partition(": ")
                fields[name] = value
        if "event" in fields:
            events.append(Event(fields["event"], json.loads(fields["data"]), fields.get("id")))
    return events, comments, rest


class SseReader:
    """Reads a streaming response of Django's async test client event by event."""

    def __init__(self, response: object) -> None:
        self.response = response
        self.chunks: AsyncIterator[bytes] = aiter(response.streaming_content)
        self.buffer = ""
        self.pending: list[Event] = []
        self.comments: list[str] = []
        self.ended = False

    async def next(self, timeout_s: float = 10) -> Event:
        while not self.pending:
            chunk = await asyncio.wait_for(anext(self.chunks), timeout_s)
            events, comments, self.buffer = parse_events(self.buffer + chunk.decode())
            self.pending += events
            self.comments += comments
        return self.pending.pop(0)

    async def raw(self, timeout_s: float = 10) -> str:
        return (await asyncio.wait_for(anext(self.chunks), timeout_s)).decode()

    async def until_done(self, timeout_s: float = 10) -> list[Event]:
        events = [await self.next(timeout_s)]
        while events[-1].event != "done":
            events.append(await self.next(timeout_s))
        with pytest.raises(StopAsyncIteration):  # the server ends the stream after done
            await asyncio.wait_for(anext(self.chunks), timeout_s)
        return events

    async def close(self) -> None:
        await self.chunks.aclose()  # what a client disconnecting does: the server's generator is closed


publish_tokens = sync_to_async(realtime.publish_tokens)
publish_call_done = sync_to_async(realtime.publish_call_done)
publish_guidance_restart = sync_to_async(realtime.publish_guidance_restart)
publish_guidance_replaced = sync_to_async(realtime.publish_guidance_replaced)


@pytest.fixture
def stream_call(transactional_db, client_and_token) -> Iterator[Call]:
    call = make_call(client=client_and_token[0])
    yield call
    realtime.redis_text_client().delete(realtime.token_stream_key(call.pk))


@pytest.fixture
async def sse(client_and_token):
    async def open_stream(call_id: int, **headers: str) -> SseReader:
        response = await AsyncClient().get(
            f"/api/v1/calls/{call_id}/stream",
            headers={"Authorization": f"Bearer {client_and_token[1]}", "Accept": "text/event-stream", **headers},
        )
        assert response.status_code == 200, response.content
        assert response["Content-Type"] == "text/event-stream"
        return SseReader(response)

    yield open_stream
    # The test client ends a streamed response in the event loop's context, so the DB connection the view
    # opened on Django's sync thread stays open (daphne closes it there); close it, or the test DB stays busy.
    await sync_to_async(connections.close_all)()


async def test_a_client_gets_the_guidance_so_far_then_each_new_token_then_done(stream_call, sse):
    await publish_tokens([(stream_call.pk, 0, "Is he "), (stream_call.pk, 1, "breathing?")])
    stream = await sse(stream_call.pk)
    replay = await stream.next()
    assert (replay.event, replay.data) == (
        "replay", {"text": "Is he breathing?", "index": 1, "done": False, "off_protocol": False}
    )
    await publish_tokens([(stream_call.pk, 2, " Start CPR.")])
    await publish_call_done(stream_call.pk, "done")
    rest = await stream.until_done()
    assert [(e.event, e.data) for e in rest] == [
        ("token", {"index": 2, "text": " Start CPR."}), ("done", {"status": "done"}),
    ]
    ids = [replay.id, *(e.id for e in rest)]
    assert all(ids) and ids == sorted(ids, key=lambda i: tuple(map(int, i.split("-"))))


async def test_a_token_that_comes_after_longer_than_redis_pys_default_read_timeout_still_reaches_the_stream(
        stream_call, sse):
    """redis-py 8 reads with a 5 s socket timeout by default; the stream blocks for its keep-alive (15 s) waiting
    for a token, and used to die at 5 s, so a call that waited in the queue longer never streamed."""
    stream = await sse(stream_call.pk)
    assert (await stream.next()).event == "replay"
    rest = asyncio.ensure_future(stream.until_done(timeout_s=30))  # the stream waits in XREAD from now on
    await asyncio.sleep(6)
    await publish_tokens([(stream_call.pk, 0, "Is he breathing?")])
    await publish_call_done(stream_call.pk, "done")
    assert [(e.event, e.data) for e in await rest] == [
        ("token", {"index": 0, "text": "Is he breathing?"}), ("done", {"status": "done"}),
    ]


async def test_a_client_resuming_with_last_event_id_gets_only_the_events_after_it(stream_call, sse):
    await publish_tokens([(stream_call.pk, 0, "Is he ")])
    first = await sse(stream_call.pk)
    replay = await first.next()
    await publish_tokens([(stream_call.pk, 1, "breathing?")])
    seen = await first.next()
    await first.close()  # the connection drops here

    await publish_tokens([(stream_call.pk, 2, " Start CPR.")])
    await publish_call_done(stream_call.pk, "done")
    resumed = await sse(stream_call.pk, **{"Last-Event-ID": seen.id})
    assert [(e.event, e.data) for e in await resumed.until_done()] == [
        ("token", {"index": 2, "text": " Start CPR."}), ("done", {"status": "done"}),
    ]
    from_replay = await sse(stream_call.pk, **{"Last-Event-ID": replay.id})
    assert [e.data.get("index") for e in await from_replay.until_done()] == [1, 2, None]


async def test_a_regenerated_guidance_is_streamed_as_restart_then_the_new_tokens(stream_call, sse):
    await publish_tokens([(stream_call.pk, 0, "Old "), (stream_call.pk, 1, "text")])
    stream = await sse(stream_call.pk)
    assert (await stream.next()).data["text"] == "Old text"
    await publish_guidance_restart(stream_call.pk)
    await publish_tokens([(stream_call.pk, 0, "New text")])
    await publish_call_done(stream_call.pk, "done")
    assert [(e.event, e.data) for e in await stream.until_done()] == [
        ("restart", {}), ("token", {"index": 0, "text": "New text"}), ("done", {"status": "done"}),
    ]
    # a client arriving now sees only the new generation
    assert (await (await sse(stream_call.pk)).next()).data["text"] == "New text"


async def test_a_guard_replacement_is_streamed_and_the_models_later_tokens_are_not(stream_call, sse):
    stream = await sse(stream_call.pk)
    assert (await stream.next()).data == {"text": "", "index": -1, "done": False, "off_protocol": False}
    await publish_tokens([(stream_call.pk, 0, "Give him aspirin")])
    await publish_guidance_replaced(stream_call.pk, "Stay on the line.")
    await publish_tokens([(stream_call.pk, 1, " and water")])
    await publish_call_done(stream_call.pk, "done")
    assert [(e.event, e.data) for e in await stream.until_done()] == [
        ("token", {"index": 0, "text": "Give him aspirin"}),
        ("guidance", {"text": "Stay on the line.", "off_protocol": True}),
        ("done", {"status": "done"}),
    ]
    late = await sse(stream_call.pk)
    assert [(e.event, e.data["text"] if e.event == "replay" else e.data) for e in await late.until_done()] == [
        ("replay", "Stay on the line."), ("done", {"status": "done"}),
    ]


async def test_a_call_that_ends_without_a_done_entry_ends_its_stream_with_its_status(stream_call, sse, settings):
    settings.TRIAGE = {**settings.TRIAGE, "STREAM_KEEPALIVE_S": 0.2}
    stream = await sse(stream_call.pk)
    assert (await stream.next()).event == "replay"
    assert await stream.raw() == ": keep-alive\n\n"  # nothing happened for STREAM_KEEPALIVE_S
    await database_sync_to_async(call_cancel)(call=stream_call, actor="system:test", reason="caller hung up")
    assert [(e.event, e.data) for e in await stream.until_done()] == [("done", {"status": "cancelled"})]


async def test_a_finished_call_whose_replay_log_expired_is_replayed_from_the_database(stream_call, sse):
    await database_sync_to_async(Call.objects.filter(pk=stream_call.pk).update)(
        status=CallStatus.DONE, guidance="Start CPR now."
    )
    events = await (await sse(stream_call.pk)).until_done()
    assert [(e.event, e.data) for e in events] == [
        ("replay", {"text": "Start CPR now.", "index": -1, "done": True, "off_protocol": False}),
        ("done", {"status": "done"}),
    ]


# --- refusals: the rules of GET calls/<id>/, as JSON ---------------------------------------------------------


@pytest.mark.django_db
def test_the_stream_needs_a_token(redis_conn, client_and_token):
    call = make_call(client=client_and_token[0])
    refused = APIClient().get(f"/api/v1/calls/{call.pk}/stream", HTTP_ACCEPT="text/event-stream")
    assert refused.status_code == 401 and refused["WWW-Authenticate"].startswith("Bearer")
    assert refused["Content-Type"] == "application/json" and refused.json()["error"]["code"]


@pytest.mark.django_db
def test_a_client_cannot_stream_another_clients_call(redis_conn, make_api_client, api):
    other, _ = make_api_client("other-cad")
    call = make_call(client=other)
    response = api.get(f"/api/v1/calls/{call.pk}/stream", HTTP_ACCEPT="text/event-stream")
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"


@pytest.mark.django_db
def test_a_malformed_last_event_id_is_refused_naming_the_header(redis_conn, client_and_token, api):
    call = make_call(client=client_and_token[0])
    response = api.get(f"/api/v1/calls/{call.pk}/stream", HTTP_LAST_EVENT_ID="yesterday")
    assert response.status_code == 400 and "Last-Event-ID" in response.json()["error"]["fields"]


# --- a real daphne ---------------------------------------------------------------------------------------------


def test_daphne_streams_the_guidance_to_a_plain_http_client(transactional_db, board_server, client_and_token):
    call = make_call(client=client_and_token[0])
    key = realtime.token_stream_key(call.pk)
    try:
        realtime.publish_tokens([(call.pk, 0, "Is he breathing?")])
        conn = http.client.HTTPConnection("127.0.0.1", board_server.port, timeout=10)
        conn.request("GET", f"/api/v1/calls/{call.pk}/stream",
                     headers={"Authorization": f"Bearer {client_and_token[1]}", "Accept": "text/event-stream"})
        response = conn.getresponse()
        assert response.status == 200 and response.getheader("Content-Type") == "text/event-stream"
        text = ""
        while "event: replay" not in text:  # the replay arrives before the generation ends
            text += response.read1(4096).decode()
        realtime.publish_tokens([(call.pk, 1, " Start CPR.")])
        realtime.publish_call_done(call.pk, "done")
        while (chunk := response.read1(4096)) != b"":
            text += chunk.decode()
        events, _, _ = parse_events(text)
        assert [(e.event, e.data.get("text", e.data.get("status"))) for e in events] == [
            ("replay", "Is he breathing?"), ("token", " Start CPR."), ("done", "done"),
        ]
        conn.close()
    finally:
        realtime.redis_text_client().delete(key)


# --- the signed stream URL, for a browser's EventSource (it cannot send Authorization) ---------------------


def _signed_path(api, call_id: int) -> str:
    from urllib.parse import urlsplit

    answer = api.get(f"/api/v1/calls/{call_id}/stream-url")
    assert answer.status_code == 200, answer.content
    url = urlsplit(answer.json()["url"])
    assert url.scheme and url.netloc and answer.json()["expires_at"]  # absolute, as an EventSource elsewhere needs
    return f"{url.path}?{url.query}"


async def test_a_signed_stream_url_opens_the_stream_without_authorization_from_any_origin(stream_call, api):
    path = await sync_to_async(_signed_path)(api, stream_call.pk)
    await publish_tokens([(stream_call.pk, 0, "Is he breathing?")])
    response = await AsyncClient().get(path, headers={"Accept": "text/event-stream", "Origin": "https://cad.example"})
    assert response.status_code == 200 and response["Content-Type"] == "text/event-stream"
    assert response["Access-Control-Allow-Origin"] == "*"  # the signature is the credential, no cookie
    replay = await SseReader(response).next()
    assert (replay.event, replay.data["text"]) == ("replay", "Is he breathing?")
    await sync_to_async(connections.close_all)()


@pytest.mark.django_db
def test_a_signed_stream_url_is_refused_tampered_for_another_call_expired_or_once_its_client_is_inactive(
        redis_conn, client_and_token, api, settings):
    from triage.services.clients import api_client_deactivate

    call, other = make_call(client=client_and_token[0]), make_call(client=client_and_token[0])
    path = _signed_path(api, call.pk)

    def refused(address: str) -> str:
        answer = APIClient().get(address, HTTP_ACCEPT="text/event-stream")
        assert answer.status_code == 401 and answer["Content-Type"] == "application/json", answer.content
        return answer.json()["error"]["message"]

    assert "Invalid stream URL" in refused(path[:-3] + "abc")
    assert "another call" in refused(path.replace(f"/calls/{call.pk}/", f"/calls/{other.pk}/"))
    settings.TRIAGE = {**settings.TRIAGE, "STREAM_URL_TTL_S": 0.0}
    time.sleep(1.1)
    assert "expired" in refused(path)
    settings.TRIAGE = {**settings.TRIAGE, "STREAM_URL_TTL_S": 600.0}
    api_client_deactivate(client=client_and_token[0], actor="system:test")
    assert "inactive" in refused(path)
