"""Webhooks to call systems: signed POSTs to a real HTTP receiver (a ``http.server`` thread), sent by the real
Celery worker on commit, retried after a failure, every attempt in the delivery log. The receiver verifies
each signature with the Standard Webhooks project's own library, as a call system would."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.db import transaction
from django.utils import timezone
from rest_framework.test import APIClient
from standardwebhooks import Webhook, WebhookVerificationError

from tests.fixtures.services import wait_until
from tests.triage.factories import call_payload, make_call
from triage.models import AuditEvent, Call, CallStatus, WebhookDelivery
from triage.services.calls import call_transition
from triage.services.errors import DomainError
from triage.services.webhooks import (
    api_client_rotate_webhook_secret,
    api_client_set_webhook,
    webhook_deliver,
    webhook_send,
)


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> dict:
        return json.loads(self.body)


@dataclass
class Receiver:
    """A call system's webhook endpoint: answers each POST with the next scripted status (then 200)."""

    url: str
    statuses: list[int] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state = Receiver(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers["content-length"]))
            # header names are case-insensitive (urllib sends "Webhook-id"): kept lowercase here
            state.received.append(Received(headers={k.lower(): v for k, v in self.headers.items()}, body=body))
            self.send_response(state.statuses.pop(0) if state.statuses else 200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/triage"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


def verified(received: Received, secret: str) -> bool:
    """The receiver's side, as docs/call-systems.md shows it: the ``standardwebhooks`` package over the raw body."""
    try:
        Webhook(secret).verify(received.body, received.headers)
    except WebhookVerificationError:
        return False
    return True


# --- one attempt, in process ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_attempt_posts_the_event_signed_with_the_clients_secret_and_is_logged(
    redis_conn, client_and_token, receiver
):
    client = api_client_set_webhook(client=client_and_token[0], url=receiver.url, actor="system:test")
    call = make_call(client=client)
    payload = {"id": "5b0e6c1e-58c1-4a43-9a3c-9f4f2a0f6b11", "type": "call.done", "call": {"id": call.pk}}
    delivery = webhook_deliver(client_id=client.pk, call_id=call.pk, payload=payload, attempt=1)

    [hit] = receiver.received
    assert hit.json == payload and hit.headers["content-type"] == "application/json"
    secret = client.webhook_secret
    assert secret.startswith("whsec_") and verified(hit, secret)
    assert not verified(Received(hit.headers, hit.body + b" "), secret)
    stale = {**hit.headers, "webhook-timestamp": str(int(hit.headers["webhook-timestamp"]) - 600)}
    assert not verified(Received(stale, hit.body), secret)  # a replay ten minutes on
    other = api_client_rotate_webhook_secret(client=client, actor="system:test")
    assert not verified(hit, other)  # signed with the secret the client had, not any other
    assert hit.headers["webhook-id"] == payload["id"] == hit.headers["x-triage-event-id"]
    assert hit.headers["x-triage-event"] == "call.done"
    row = WebhookDelivery.objects.get()
    assert row == delivery and (row.outcome, row.status_code, row.attempt, row.error) == ("delivered", 200, 1, "")
    assert row.call == call and row.url == receiver.url and row.started_at <= row.finished_at


@pytest.mark.django_db
def test_a_failed_attempt_is_retried_until_the_last_allowed_one(redis_conn, client_and_token, receiver, settings):
    settings.TRIAGE = {**settings.TRIAGE, "WEBHOOK_MAX_ATTEMPTS": 3}
    client = api_client_set_webhook(client=client_and_token[0], url=receiver.url, actor="system:test")
    receiver.statuses = [500, 503]
    payload = {"id": "0c7a1a37-7b8f-4a55-9b8c-2a3f0d1e2b33", "type": "call.failed", "call": {}}
    first = webhook_deliver(client_id=client.pk, call_id=0, payload=payload, attempt=1)
    last = webhook_deliver(client_id=client.pk, call_id=0, payload=payload, attempt=3)
    assert (first.outcome, first.status_code, first.error) == ("retrying", 500, "HTTP 500 Internal Server Error")
    assert (last.outcome, last.status_code) == ("gave_up", 503)


@pytest.mark.django_db
def test_an_event_given_up_is_counted_by_outcome_for_the_alert(redis_conn, client_and_token, receiver, settings):
    """TriageWebhooksGivenUp (docs/observability/alerts.yml) reads this counter."""
    from prometheus_client import REGISTRY

    from triage.tasks import deliver_webhook

    settings.TRIAGE = {**settings.TRIAGE, "WEBHOOK_MAX_ATTEMPTS": 1}
    client = api_client_set_webhook(client=client_and_token[0], url=receiver.url, actor="system:test")
    receiver.statuses = [503]
    payload = {"id": "5d0c7e1a-9b1f-4c55-8a2e-6f3d2b1a0c99", "type": "call.failed", "call": {}}

    def given_up() -> float:
        return REGISTRY.get_sample_value("triage_webhook_deliveries_total", {"outcome": "gave_up"}) or 0.0

    before = given_up()
    assert deliver_webhook.apply(kwargs={"client_id": client.pk, "call_id": 0, "payload": payload}).get() == "gave_up"
    assert given_up() == before + 1


@pytest.mark.django_db
def test_an_unreachable_receiver_is_a_failed_attempt_with_the_reason(redis_conn, client_and_token, receiver):
    client = api_client_set_webhook(client=client_and_token[0], url="http://127.0.0.1:9/nothing", actor="system:test")
    delivery = webhook_deliver(client_id=client.pk, call_id=0, payload={"id": None, "type": "call.done"}, attempt=1)
    assert delivery.outcome == "retrying" and delivery.status_code is None and "refused" in delivery.error.lower()


@pytest.mark.django_db
def test_a_url_resolving_to_a_private_address_is_not_called(redis_conn, client_and_token, receiver, settings):
    """SSRF: a webhook must not make the server reach into its own network (unless an operator allows it)."""
    settings.TRIAGE = {**settings.TRIAGE, "WEBHOOK_ALLOW_PRIVATE_NETWORKS": False}
    client = api_client_set_webhook(client=client_and_token[0], url=receiver.url, actor="system:test")
    delivery = webhook_deliver(client_id=client.pk, call_id=0, payload={"id": None, "type": "call.done"}, attempt=1)
    assert delivery.outcome == "skipped" and "not a public address" in delivery.error
    assert receiver.received == []


@pytest.mark.django_db
@pytest.mark.parametrize(
    "url", ["ftp://cad.example.org/hook", "javascript:alert(1)", "https://", "https://user:pw@cad.example.org/h"]
)
def test_only_an_http_or_https_url_with_a_host_is_accepted(client_and_token, url):
    with pytest.raises(DomainError) as refused:
        api_client_set_webhook(client=client_and_token[0], url=url, actor="system:test")
    assert "webhook_url" in refused.value.fields


@pytest.mark.django_db
def test_every_client_has_a_signing_secret_and_rotation_draws_a_new_one(client_and_token):
    client = client_and_token[0]
    before = client.webhook_secret
    assert before.startswith("whsec_") and len(before) > 40
    assert api_client_rotate_webhook_secret(client=client, actor="system:test") != before


@pytest.mark.django_db
def test_after_a_rotation_events_verify_with_the_old_and_the_new_secret_until_the_overlap_ends(
    redis_conn, client_and_token, receiver
):
    client = api_client_set_webhook(client=client_and_token[0], url=receiver.url, actor="system:test")
    call = make_call(client=client)
    old = client.webhook_secret
    new = api_client_rotate_webhook_secret(client=client, actor="system:test")
    payload = {"id": "0b9c2a43-6f0e-4a6b-9f1e-2d3c4b5a6978", "type": "call.done", "call": {"id": call.pk}}
    webhook_deliver(client_id=client.pk, call_id=call.pk, payload=payload, attempt=1)
    during = receiver.received[-1]
    assert len(during.headers["webhook-signature"].split(" ")) == 2
    assert verified(during, old) and verified(during, new)  # a receiver on either secret accepts it

    client.webhook_secret_previous_until = timezone.now()  # the overlap is over
    client.save(update_fields=["webhook_secret_previous_until"])
    webhook_deliver(client_id=client.pk, call_id=call.pk, payload=payload, attempt=2)
    after = receiver.received[-1]
    assert verified(after, new) and not verified(after, old)


# --- on commit, never inside the transaction -----------------------------------------------------------------


@pytest.mark.django_db
def test_the_event_is_sent_only_when_the_transition_commits(
    redis_conn, client_and_token, receiver, django_capture_on_commit_callbacks
):
    client = api_client_set_webhook(client=client_and_token[0], url=receiver.url, actor="system:test")
    call = make_call(client=client)
    with django_capture_on_commit_callbacks() as rolled_back:
        with pytest.raises(RuntimeError), transaction.atomic():
            call_transition(call=call, to_status=CallStatus.FAILED, actor="system:test")
            raise RuntimeError("the transaction fails after the transition")
    assert rolled_back == []
    with django_capture_on_commit_callbacks() as committed:
        call_transition(call=Call.objects.get(pk=call.pk), to_status=CallStatus.FAILED, actor="system:test")
    assert [c.keywords["call_id"] for c in committed if isinstance(c, partial) and c.func is webhook_send] == [call.pk]


@pytest.mark.django_db
def test_a_dispatchers_changes_to_a_call_are_events_too_with_who_and_from_what(
    redis_conn, client_and_token, receiver, dispatcher, django_capture_on_commit_callbacks
):
    """level changed, protocol switched, acknowledged, cancelled, closed: what a CAD needs beside triaged,
    done and failed (docs/call-systems.md), each with the dispatcher and what changed."""
    from triage.models import TriageAssessment
    from triage.services.board import call_acknowledge, call_close
    from triage.services.calls import call_cancel
    from triage.services.overrides import call_override_level
    from triage.services.protocols import call_switch_protocol

    client = api_client_set_webhook(client=client_and_token[0], url=receiver.url, actor="system:test")
    call = make_call(client=client)
    TriageAssessment.objects.create(call=call, predicted_esi=3, probabilities=[0.2] * 5, predicted_output_tokens=40,
                                    model_version="test", latency_ms=1, protocol="chest_pain", reasons=["C: 2 resources"])
    Call.objects.filter(pk=call.pk).update(level=3)
    call_transition(call=Call.objects.get(pk=call.pk), to_status=CallStatus.TRIAGED, actor="system:test")
    steps = [
        lambda c: call_override_level(call=c, level=1, reason="he has gone grey and sweaty", user=dispatcher),
        lambda c: call_switch_protocol(call=c, protocol="heart_problem", user=dispatcher),
        lambda c: call_acknowledge(call=c, user=dispatcher),
        lambda c: call_cancel(call=c, actor=dispatcher, reason="duplicate of another call"),
        lambda c: call_close(call=c, user=dispatcher, outcome="duplicate"),
    ]
    events = []
    for step in steps:
        with django_capture_on_commit_callbacks() as committed:
            step(Call.objects.get(pk=call.pk))
        events += [c.keywords["payload"] for c in committed if isinstance(c, partial) and c.func is webhook_send]
    assert [e["type"] for e in events] == ["call.level_changed", "call.protocol_switched", "call.acknowledged",
                                           "call.cancelled", "call.closed"]
    changed, switched, acknowledged, cancelled, closed = (e["call"] for e in events)
    assert (changed["esi"], changed["from_esi"], changed["change"], changed["by"]) == (1, 3, "override", dispatcher.username)
    assert changed["reason"] == "he has gone grey and sweaty"
    assert (switched["protocol"], switched["from_protocol"]) == ("heart_problem", "chest_pain")
    assert acknowledged["by"] == dispatcher.username and acknowledged["acknowledged_at"]
    assert cancelled["lifecycle"] == "cancelled" and cancelled["cancelled_at"]
    assert (closed["lifecycle"], closed["outcome"]) == ("closed", "duplicate")
    assert len({e["id"] for e in events}) == 5


@pytest.mark.django_db
def test_a_call_system_pings_its_receiver_and_has_an_event_sent_again_as_first_sent(
    redis_conn, client_and_token, receiver, api, django_capture_on_commit_callbacks
):
    def sent(committed: list) -> list[dict]:
        return [c.keywords["payload"] for c in committed if isinstance(c, partial) and c.func is webhook_send]

    refused = api.post("/api/v1/webhooks/ping/")
    assert refused.status_code == 409 and "webhook_url" in refused.json()["error"]["fields"]
    client = api_client_set_webhook(client=client_and_token[0], url=receiver.url, actor="system:test")
    with django_capture_on_commit_callbacks() as committed:
        answer = api.post("/api/v1/webhooks/ping/")
    assert answer.status_code == 202
    [ping] = sent(committed)
    assert (ping["type"], ping["id"], ping["client"]) == ("webhook.ping", answer.json()["event_id"], client.name)

    first = webhook_deliver(client_id=client.pk, call_id=0, payload=ping, attempt=1)  # as the worker does
    assert first.outcome == "delivered" and verified(receiver.received[-1], client.webhook_secret)
    with django_capture_on_commit_callbacks() as committed:
        again = api.post("/api/v1/webhooks/resend/", {"event_id": ping["id"]}, format="json")
    assert again.status_code == 202 and sent(committed) == [ping]  # the same body, the same id
    unknown = api.post("/api/v1/webhooks/resend/", {"event_id": "5d0c7e1a-9b1f-4c55-8a2e-6f3d2b1a0c98"}, format="json")
    assert unknown.status_code == 400 and "event_id" in unknown.json()["error"]["fields"]
    assert AuditEvent.objects.filter(action__in=["api_client.webhook_pinged", "webhook.resent"]).count() == 2


# --- end to end: the API, the real worker, the receiver -------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_call_system_hears_of_triage_after_a_retry_and_of_failure_with_every_attempt_logged(
    celery_worker_process, redis_conn, client_and_token, receiver
):
    client = api_client_set_webhook(client=client_and_token[0], url=receiver.url, actor="system:test")
    receiver.statuses = [500]  # the first POST fails; the retry succeeds
    http = APIClient()
    http.credentials(HTTP_AUTHORIZATION=f"Bearer {client_and_token[1]}")
    call_id = http.post("/api/v1/calls/", call_payload(external_id="CAD-HOOK"), format="json").json()["id"]

    wait_until(lambda: len(receiver.received) >= 2, timeout_s=90)
    first, retry = receiver.received[:2]
    assert first.body == retry.body  # the same event, byte for byte; each attempt signs it afresh
    event = retry.json
    assert event["type"] == "call.triaged" and event["call"]["id"] == call_id
    assert event["call"]["external_id"] == "CAD-HOOK" and event["call"]["esi"] in (1, 2, 3, 4, 5)
    assert event["call"]["url"] == f"/api/v1/calls/{call_id}/"
    assert all(verified(r, client.webhook_secret) for r in (first, retry))
    assert first.headers["webhook-id"] == retry.headers["webhook-id"]  # one event, attempted twice
    assert [r.headers["x-triage-attempt"] for r in (first, retry)] == ["1", "2"]

    wait_until(lambda: Call.objects.get(pk=call_id).status == CallStatus.QUEUED, timeout_s=30)
    call_transition(call=Call.objects.get(pk=call_id), to_status=CallStatus.FAILED, actor="system:test",
                    updates={"failure_reason": "engine lost"})
    wait_until(lambda: len(receiver.received) >= 3, timeout_s=30)
    failed = receiver.received[2].json
    assert failed["type"] == "call.failed" and failed["call"]["failure_reason"] == "engine lost"

    wait_until(lambda: WebhookDelivery.objects.filter(outcome="delivered").count() == 2, timeout_s=10)
    log = list(WebhookDelivery.objects.order_by("started_at").values_list("event", "attempt", "outcome", "status_code"))
    assert log == [
        ("call.triaged", 1, "retrying", 500), ("call.triaged", 2, "delivered", 200), ("call.failed", 1, "delivered", 200),
    ]
    assert len(set(WebhookDelivery.objects.filter(event="call.triaged").values_list("event_id", flat=True))) == 1


def test_secrets_drawn_before_standard_webhooks_are_rewritten_to_the_same_key_every_library_decodes():
    """Secrets were whsec_ + URL-safe base64 without padding; the Python library fails on some of them (it drops
    - and _ and is left with a length no base64 has) and keys others with other bytes. Migration 0017 rewrites
    each as the standard base64 of the same key, which then signs events the library verifies."""
    import base64
    import importlib
    import secrets

    from triage.services.webhooks import webhook_signature_headers

    rewrite = importlib.import_module("triage.migrations.0017_webhook_secrets_in_the_standard_alphabet")
    body = json.dumps({"id": "e1", "type": "call.done"}).encode()
    key = bytes([0xFB, 0xEF, 0xBE]) * 10 + bytes([0xFB, 0xEF])  # 42 '-' and an '8': the library cannot decode it
    old_styles = ["whsec_" + base64.urlsafe_b64encode(key).decode().rstrip("=")]
    old_styles += ["whsec_" + secrets.token_urlsafe(32) for _ in range(200)]
    with pytest.raises(ValueError):
        Webhook(old_styles[0])
    for old_style in old_styles:
        rewritten = rewrite.standard_alphabet(old_style)
        encoded = old_style.removeprefix("whsec_")
        assert base64.b64decode(rewritten.removeprefix("whsec_"), validate=True) == base64.urlsafe_b64decode(
            encoded + "=" * (-len(encoded) % 4))
        assert rewrite.standard_alphabet(rewritten) == rewritten
        headers = webhook_signature_headers(signing_secrets=[rewritten], event_id="e1", timestamp=int(time.time()),
                                            body=body)
        assert Webhook(rewritten).verify(body, headers) == {"id": "e1", "type": "call.done"}


@pytest.mark.django_db
def test_a_supervisor_sends_an_event_again_from_the_admins_delivery_log(
    redis_conn, client_and_token, receiver, supervisor, client, django_capture_on_commit_callbacks
):
    hooked = api_client_set_webhook(client=client_and_token[0], url=receiver.url, actor="system:test")
    receiver.statuses = [503]
    payload = {"id": "0b8e7a37-7b8f-4a55-9b8c-2a3f0d1e2b34", "type": "call.failed", "call": {"id": 0}}
    given_up = webhook_deliver(client_id=hooked.pk, call_id=0, payload=payload, attempt=6)
    assert given_up.outcome == "gave_up"
    supervisor.is_staff = True
    supervisor.save(update_fields=["is_staff"])
    client.force_login(supervisor)
    with django_capture_on_commit_callbacks() as committed:
        answer = client.post("/admin/triage/webhookdelivery/",
                             {"action": "resend_events", "_selected_action": [given_up.pk]})
    assert answer.status_code == 302
    assert [c.keywords["payload"] for c in committed if isinstance(c, partial) and c.func is webhook_send] == [payload]
