"""`manage.py demo --production-like` runs compose's topology on this host: Caddy with proxy/Caddyfile (the file
compose mounts) in front of daphne and the gunicorn intake, Celery's triage and webhook workers, beat and the
inference worker, with production's settings. Through the proxy, over TLS verified against the proxy's own CA:
a call posted to the intake streams its guidance token by token from daphne while 50 other guidance streams are
open, and the intake keeps accepting calls (issue 32: SSE on the intake's sync workers was buffered and tied
them up). The board answers through the proxy; /metrics does not."""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pytest

from tests.fixtures.production_stack import production_like_stack
from triage.call_status import CallStatus
from triage.models import Call

OTHER_STREAMS = 50
ROUTINE = "I twisted my ankle stepping off the kerb yesterday, it is a bit swollen but I can walk on it"
URGENT = "my husband collapsed, he is not breathing and his lips are blue"


@dataclass
class Stream:
    """One guidance stream read on a thread of its own: each event with the time it arrived."""

    call_id: int
    events: list[tuple[float, str, dict]] = field(default_factory=list)
    error: str = ""
    connected: threading.Event = field(default_factory=threading.Event)

    def kinds(self) -> list[str]:
        return [kind for _, kind, _ in self.events]

    def done_at(self) -> float | None:
        return next((at for at, kind, _ in self.events if kind == "done"), None)


def _connection(port: int, context: ssl.SSLContext) -> http.client.HTTPSConnection:
    return http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=120)


def _post_call(port: int, context: ssl.SSLContext, token: str, transcript: str) -> tuple[int, dict]:
    conn = _connection(port, context)
    body = {"external_id": f"prod-like-{uuid.uuid4().hex[:12]}", "transcript": transcript,
            "received_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    conn.request("POST", "/api/v1/calls/", body=json.dumps(body),
                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"})
    response = conn.getresponse()
    answer = json.loads(response.read() or b"{}")
    conn.close()
    assert "gunicorn" in response.msg.get_all("Server", []), response.getheaders()  # the intake took it
    return response.status, answer


def _read_stream(port: int, context: ssl.SSLContext, token: str, stream: Stream) -> None:
    try:
        conn = _connection(port, context)
        conn.request("GET", f"/api/v1/calls/{stream.call_id}/stream", headers={"Authorization": f"Bearer {token}"})
        response = conn.getresponse()
        if response.status != 200 or "daphne" not in response.msg.get_all("Server", []):
            stream.error = f"{response.status} {response.getheaders()}: {response.read()[:300]!r}"
            return
        stream.connected.set()
        kind = ""
        while True:
            line = response.fp.readline()
            if not line:
                return
            line = line.decode().rstrip("\n")
            if line.startswith("event: "):
                kind = line[len("event: "):]
            elif line.startswith("data: "):
                stream.events.append((time.monotonic(), kind, json.loads(line[len("data: "):])))
                if kind == "done":
                    conn.close()
                    return
    except Exception as error:  # noqa: BLE001 - reported by the test's assertion
        stream.error = repr(error)
    finally:
        stream.connected.set()


def _open_stream(port: int, context: ssl.SSLContext, token: str, call_id: int) -> Stream:
    stream = Stream(call_id)
    threading.Thread(target=_read_stream, args=(port, context, token, stream), daemon=True).start()
    return stream


def _get(port: int, context: ssl.SSLContext, path: str) -> http.client.HTTPResponse:
    conn = _connection(port, context)
    conn.request("GET", path)
    response = conn.getresponse()
    response.read()
    return response


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_through_the_proxy_a_call_streams_token_by_token_while_50_streams_are_open_and_calls_are_accepted(
        tiny_guidance_model, trained_predictors_dir, redis_conn, settings, tmp_path):
    with production_like_stack(tmp_path=tmp_path, redis_url=settings.REDIS_URL, guidance_model=tiny_guidance_model,
                               predictors_dir=trained_predictors_dir) as stack:
        port, token, context = stack.port, stack.token, stack.context
        names = " ".join(" ".join(p.cmdline()) for p in stack.processes())
        for process in ("caddy", "gunicorn", "daphne", "celery", "run_inference_worker"):
            assert process in names, names

        # the board through the proxy, as https (production's settings: no redirect loop, no DEBUG page)
        assert _get(port, context, "/").status == 302
        assert _get(port, context, "/accounts/login/").status == 200
        assert _get(port, context, "/metrics").status == 404

        # The inference worker is held (SIGSTOP, as a GPU busy elsewhere would hold it) while 50 routine calls and
        # then an urgent one are posted: their streams open and wait. Let go, the engine starts the urgent call
        # first, and its tokens stream while the 50 others are still open.
        engine = next(p for p in stack.processes() if "run_inference_worker" in " ".join(p.cmdline()))
        engine.suspend()
        with ThreadPoolExecutor(8) as pool:
            posted = list(pool.map(lambda _: _post_call(port, context, token, ROUTINE), range(OTHER_STREAMS)))
        assert [status for status, _ in posted] == [201] * OTHER_STREAMS, posted
        others = [_open_stream(port, context, token, answer["id"]) for _, answer in posted]
        for stream in others:
            assert stream.connected.wait(60) and not stream.error, stream.error

        status, answer = _post_call(port, context, token, URGENT)
        assert status == 201, answer
        urgent = _open_stream(port, context, token, answer["id"])
        accepted = [_post_call(port, context, token, ROUTINE)[0] for _ in range(20)]
        assert accepted == [201] * 20
        deadline = time.monotonic() + 60
        while Call.objects.get(pk=answer["id"]).status != CallStatus.QUEUED:
            assert time.monotonic() < deadline, "the urgent call was not triaged"
            time.sleep(0.2)
        engine.resume()

        deadline = time.monotonic() + 120
        while urgent.done_at() is None and not urgent.error:
            assert time.monotonic() < deadline, urgent.kinds()
            time.sleep(0.1)
        assert not urgent.error, urgent.error
        tokens = [at for at, kind, _ in urgent.events if kind == "token"]
        assert not [s.error for s in others if s.error]
        open_meanwhile = [s for s in others if (s.done_at() or float("inf")) > tokens[0]]
        assert len(open_meanwhile) == OTHER_STREAMS, [s.kinds() for s in others]
        assert urgent.kinds()[-1] == "done" and urgent.events[-1][2]["status"] == "done", urgent.kinds()
        assert len(tokens) >= 2
        assert tokens[-1] - tokens[0] > 0.02  # tokens arrived as generated, not buffered into one write

        # a browser's way in: the intake signs an absolute https URL of the proxy, opened without Authorization
        conn = _connection(port, context)
        conn.request("GET", f"/api/v1/calls/{urgent.call_id}/stream-url", headers={"Authorization": f"Bearer {token}"})
        signed = json.loads(conn.getresponse().read())["url"]
        assert signed.startswith(f"https://127.0.0.1:{port}/api/v1/calls/{urgent.call_id}/stream?access="), signed
        conn = _connection(port, context)
        conn.request("GET", signed.removeprefix(f"https://127.0.0.1:{port}"))
        response = conn.getresponse()
        assert response.status == 200 and b"event: replay" in response.read()
