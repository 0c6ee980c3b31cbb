"""The intake server (gunicorn, WSGI) cannot stream: asked for a call's guidance stream it answers 421 at once,
naming where the stream is served, so a misdirected EventSource never holds one of its workers (which would stop
it accepting calls). With several workers behind one port its /metrics sums them all. Over real HTTP, to a real
gunicorn on the test database."""

from __future__ import annotations

import http.client
import json
import sys
from collections.abc import Iterator

import pytest
from django.utils import timezone

from tests.fixtures.browser import ServerProcess, _child_env
from tests.triage.factories import make_call
from tools.stack import free_port

pytestmark = pytest.mark.usefixtures("redis_conn")

# as compose runs the intake (config.settings_intake), on the suite's settings
INTAKE_ENV = {"DJANGO_SETTINGS_MODULE": "tests.settings_intake"}


@pytest.fixture
def intake_server(transactional_db, django_db_blocker, tmp_path) -> Iterator[ServerProcess]:
    """One sync worker: a single held request would be enough to stop it accepting calls."""
    port = free_port()
    server = ServerProcess(
        name="gunicorn",
        argv=[sys.executable, "-m", "gunicorn", "--workers", "1", "--timeout", "30", "-b", f"127.0.0.1:{port}",
              "config.wsgi:application"],
        env={**_child_env(django_db_blocker), **INTAKE_ENV}, log_path=tmp_path / "gunicorn.log", port=port,
    )
    server.start(ready=lambda: _healthy(server), timeout_s=120)  # the worker has loaded the app
    yield server
    server.stop()


def _healthy(server: ServerProcess) -> bool:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        conn.request("GET", "/healthz")
        return conn.getresponse().status == 200
    except OSError:
        return False


def _request(server: ServerProcess, method: str, path: str, token: str, body: dict | None = None,
             **headers: str) -> tuple[int, dict]:
    # A held stream would time out here; 15 s, not 5: a cold first request on a busy 2-core machine took over 5 s
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=15)
    try:
        conn.request(method, path, json.dumps(body) if body is not None else None,
                     {"Authorization": f"Bearer {token}", "Content-Type": "application/json", **headers})
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        conn.close()


def test_the_intake_refuses_a_stream_at_once_and_keeps_accepting_calls(intake_server, client_and_token):
    client, token = client_and_token
    call = make_call(client=client)
    for _ in range(3):  # three EventSources pointed at the intake
        status, body = _request(intake_server, "GET", f"/api/v1/calls/{call.pk}/stream", token,
                                Accept="text/event-stream")
        assert status == 421
        assert body["error"]["code"] == "stream_needs_asgi" and "web process" in body["error"]["message"]
    status, body = _request(intake_server, "POST", "/api/v1/calls/", token, {
        "external_id": "after-streams", "received_at": timezone.now().isoformat(), "transcript": "He fell off a ladder.",
    })
    assert status == 201, body


def test_the_intake_serves_the_api_and_its_schema_but_no_board_admin_or_login(intake_server, client_and_token):
    _, token = client_and_token
    status, body = _request(intake_server, "GET", "/api/v1/calls/", token)
    assert status == 200 and "results" in body
    conn = http.client.HTTPConnection("127.0.0.1", intake_server.port, timeout=15)
    try:
        for path, expected in (("/api/schema/", 200), ("/healthz", 200), ("/", 404), ("/admin/", 404),
                               ("/admin/login/", 404), ("/accounts/login/", 404), ("/calls/1/", 404),
                               ("/api/docs/", 404)):
            conn.request("GET", path, headers={"X-Forwarded-Proto": "https"})
            response = conn.getresponse()
            response.read()
            assert response.status == expected, path
    finally:
        conn.close()


def test_a_stream_of_another_clients_call_is_still_not_found_first(intake_server, client_and_token, make_api_client):
    _, token = client_and_token
    other, _ = make_api_client("cad-other")
    status, body = _request(intake_server, "GET", f"/api/v1/calls/{make_call(client=other).pk}/stream", token)
    assert status == 404, body


@pytest.fixture
def three_worker_intake(transactional_db, django_db_blocker, tmp_path) -> Iterator[ServerProcess]:
    """The intake as compose runs it: three sync workers behind one port, in prometheus_client's multiprocess mode."""
    port = free_port()
    env = {**_child_env(django_db_blocker), **INTAKE_ENV, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "prometheus"),
           "TRIAGE_METRICS_TOKEN": "scrape-me"}
    server = ServerProcess(
        name="gunicorn",
        argv=[sys.executable, "-m", "gunicorn", "-c", "config/gunicorn.py", "--workers", "3", "--timeout", "30",
              "-b", f"127.0.0.1:{port}", "config.wsgi:application"],
        env=env, log_path=tmp_path / "gunicorn.log", port=port,
    )
    server.start(ready=lambda: _healthy(server), timeout_s=120)
    yield server
    server.stop()


def _accepted_posts(server: ServerProcess) -> float:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request("GET", "/metrics", headers={"Authorization": "Bearer scrape-me"})
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("triage_web_requests_total{") and 'method="POST"' in line and 'status="2xx"' in line)


def test_every_scrape_of_a_multi_worker_intake_counts_the_requests_of_all_its_workers(
    three_worker_intake, client_and_token
):
    _, token = client_and_token
    for i in range(12):  # new connections: gunicorn spreads them over its workers
        status, body = _request(three_worker_intake, "POST", "/api/v1/calls/", token, {
            "external_id": f"counted-{i}", "received_at": timezone.now().isoformat(), "transcript": "He fell.",
        })
        assert status == 201, body
    # each scrape lands on some worker; every one reports the sum over the three
    assert [_accepted_posts(three_worker_intake) for _ in range(6)] == [12.0] * 6
