"""Webhooks: a call system hears what happens to its call without polling (docs/call-systems.md): triaged,
its level changed by a dispatcher, its protocol switched, guidance done or failed, cancelled, acknowledged,
closed (``WebhookEvent``).

* An API client may have a ``webhook_url`` (http or https) and always has a signing secret, drawn when the
  client is created and again on ``api_client_rotate_webhook_secret``.
* The services that change a call call ``calls_webhook_on_commit`` inside their transaction (a status move
  names its event through ``WEBHOOK_EVENTS``; the others name theirs); it builds the payload from the state being committed and publishes the Celery task
  ``deliver_webhook`` once the transaction commits — a rolled-back change sends nothing.
* The task POSTs the JSON body signed as Standard Webhooks specifies (https://www.standardwebhooks.com:
  ``webhook-id``, ``webhook-timestamp``, ``webhook-signature: v1,<base64 HMAC-SHA256 over id.timestamp.body>``
  keyed by the base64-decoded secret), by that project's own ``standardwebhooks`` package, so a receiver
  verifies with its library in any language; records every attempt as a ``WebhookDelivery`` row, and retries a
  failure (no answer, or not 2xx) with exponential backoff, at most ``WEBHOOK_MAX_ATTEMPTS`` attempts in all.
  The event id (``webhook-id``) stays the same across attempts, so a receiver can drop a repeat (a worker that
  died mid-POST sends it again).

Server-side request forgery: the URL is set by our administrators, not by the call systems, but a webhook still
makes this server connect where it is told. Unless ``WEBHOOK_ALLOW_PRIVATE_NETWORKS`` is on, a URL whose host
resolves to a loopback, private, link-local or otherwise non-global address is refused at each attempt.
The check resolves the name before urllib resolves it again, so a DNS answer that changes in between
(rebinding) is not caught; put an egress proxy or firewall in front of the workers where that matters.
Redirects are not followed (a 3xx is a failed attempt), so a public URL cannot bounce the POST inward.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import logging
import secrets
import socket
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from functools import partial
from typing import Any
from urllib.parse import urlsplit

from celery import current_app as celery_app
from django.conf import settings
from django.db import transaction
from django.urls import reverse
from django.utils import timezone
from standardwebhooks import Webhook

from triage.dispatch_priority import DispatchPriorityTable
from triage.models import ApiClient, AuditAction, Call, CallStatus, WebhookDelivery
from triage.selectors.dispatch_priorities import call_dispatch_priority, dispatch_priority_table

from .audit import Actor, audit_record
from .errors import Conflict, field_error

logger = logging.getLogger(__name__)

DELIVER_TASK = "triage.tasks.deliver_webhook"  # published by name: services never import the task module


class WebhookEvent(StrEnum):
    TRIAGED = "call.triaged"
    LEVEL_CHANGED = "call.level_changed"  # a dispatcher overrode or confirmed another level, or a re-triage raised it
    PROTOCOL_SWITCHED = "call.protocol_switched"  # a dispatcher or a re-triage switched it: the guidance is redone
    DONE = "call.done"
    FAILED = "call.failed"
    CANCELLED = "call.cancelled"
    ACKNOWLEDGED = "call.acknowledged"
    CLOSED = "call.closed"


PING_EVENT = "webhook.ping"  # a test event: no call, sent when asked (admin, API)

# The status moves that are events of their own
WEBHOOK_EVENTS = {CallStatus.TRIAGED: WebhookEvent.TRIAGED, CallStatus.DONE: WebhookEvent.DONE,
                  CallStatus.FAILED: WebhookEvent.FAILED, CallStatus.CANCELLED: WebhookEvent.CANCELLED}
SECRET_PREFIX = "whsec_"  # Standard Webhooks: whsec_ + the base64 of the key
URL_MAX_CHARS = 500
ERROR_MAX_CHARS = 500


def webhook_secret_new() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def webhook_url_clean(url: str) -> str:
    """``url`` if it is an http(s) URL with a host and no credentials, else a DomainError naming the field."""
    url = url.strip()
    if not url:
        return ""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise field_error("webhook_url", "an http:// or https:// URL with a host")
    if parts.username or parts.password:
        raise field_error("webhook_url", "no user or password in the URL (the signature authenticates us)")
    if len(url) > URL_MAX_CHARS:
        raise field_error("webhook_url", f"at most {URL_MAX_CHARS} characters")
    return url


def api_client_set_webhook(*, client: ApiClient, url: str, actor: Actor) -> ApiClient:
    """Set (or, with ``""``, remove) the client's webhook URL; a client without a secret gets one."""
    client.webhook_url = webhook_url_clean(url)
    fields = ["webhook_url"]
    if not client.webhook_secret:
        client.webhook_secret = webhook_secret_new()
        fields.append("webhook_secret")
    with transaction.atomic():
        client.save(update_fields=fields)
        audit_record(action=AuditAction.API_CLIENT_WEBHOOK_SET, actor=actor,
                     data={"client": client.name, "webhook_url": client.webhook_url})
    return client


def api_client_rotate_webhook_secret(*, client: ApiClient, actor: Actor) -> str:
    """A new signing secret for the client's webhooks. The old one keeps signing beside it for
    ``WEBHOOK_SECRET_OVERLAP_S`` (every event carries both signatures meanwhile), so the receiver can take the
    new one without a gap. Returns the new one."""
    client.webhook_secret_previous = client.webhook_secret
    client.webhook_secret_previous_until = timezone.now() + timedelta(
        seconds=settings.TRIAGE["WEBHOOK_SECRET_OVERLAP_S"])
    client.webhook_secret = webhook_secret_new()
    with transaction.atomic():
        client.save(update_fields=["webhook_secret", "webhook_secret_previous", "webhook_secret_previous_until"])
        audit_record(action=AuditAction.API_CLIENT_WEBHOOK_SECRET_ROTATED, actor=actor, data={"client": client.name})
    return client.webhook_secret


# --- events ------------------------------------------------------------------------------------------------


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def webhook_payload(*, call: Call, event: str, event_id: str, occurred_at: datetime,
                    dispatch_table: DispatchPriorityTable | None = None,
                    details: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON body of an event: what the call looks like in the transaction that caused it, with the centre's
    dispatch priority for it (``dispatch_table``: the table read once for a batch of calls) and what the event
    itself says (``details``: who changed the level, and from what)."""
    priority = call_dispatch_priority(call, table=dispatch_table)
    data: dict[str, Any] = {
        "id": call.pk,
        "external_id": call.external_id,
        "lifecycle": call.lifecycle,
        "status": call.status,
        "esi": call.level,
        "tier": call.tier.name if call.tier_id else None,
        "received_at": _iso(call.received_at),
        "triaged_at": _iso(call.triaged_at),
        "url": reverse("api-call-detail", args=[call.pk]),
        "stream_url": reverse("api-call-stream", args=[call.pk]),
        "dispatch_priority": priority.as_dict() if priority is not None else None,
    }
    if event == WebhookEvent.DONE:
        data.update(done_at=_iso(call.done_at), guidance=call.guidance,
                    guidance_protocol=call.guidance_protocol, off_protocol=call.off_protocol_sentences > 0)
    elif event == WebhookEvent.FAILED:
        data.update(failed_at=_iso(call.failed_at), failure_reason=call.failure_reason)
    elif event == WebhookEvent.CANCELLED:
        data.update(cancelled_at=_iso(call.cancelled_at))
    data.update(details or {})
    return {"id": event_id, "type": event, "created_at": _iso(occurred_at), "call": data}


def calls_webhook_on_commit(calls: Sequence[Call], *, status: str | None = None, event: WebhookEvent | None = None,
                            details: dict[str, Any] | None = None) -> None:
    """Inside the transaction that moves ``calls`` to ``status`` (or changes them as ``event`` says): their
    clients' webhooks get the event once it commits. One query finds which clients have a webhook; calls of
    other clients cost nothing more."""
    event = event or WEBHOOK_EVENTS.get(status)
    client_ids = {call.client_id for call in calls if call.client_id is not None}
    if event is None or not client_ids:
        return
    hooked = set(
        ApiClient.objects.filter(pk__in=client_ids, is_active=True).exclude(webhook_url="").values_list("pk", flat=True)
    )
    if not hooked:
        return
    now = timezone.now()
    table = dispatch_priority_table()
    for call in calls:
        if call.client_id in hooked:
            event_id = str(uuid.uuid4())
            payload = webhook_payload(call=call, event=event, event_id=event_id, occurred_at=now, dispatch_table=table,
                                      details=details)
            transaction.on_commit(partial(webhook_send, client_id=call.client_id, call_id=call.pk, payload=payload))


def webhook_send(*, client_id: int, call_id: int, payload: dict[str, Any]) -> bool:
    """Publish the delivery task. A broker that is away loses this event (logged): the call itself is safe,
    and the client can still read it with GET calls/<id>/."""
    try:
        celery_app.send_task(DELIVER_TASK, kwargs={"client_id": client_id, "call_id": call_id, "payload": payload})
    except Exception:  # kombu raises several unrelated types when the broker is away
        logger.warning("webhook %s for call %s not sent", payload.get("type"), call_id, exc_info=True)
        return False
    return True


# --- delivery ----------------------------------------------------------------------------------------------


def webhook_ping(*, client: ApiClient, actor: Actor) -> str:
    """Send the client's webhook a test event (``webhook.ping``, signed like every other); returns its id."""
    client = _with_webhook(client)
    event_id = str(uuid.uuid4())
    payload = {"id": event_id, "type": PING_EVENT, "created_at": _iso(timezone.now()), "client": client.name}
    with transaction.atomic():
        audit_record(action=AuditAction.API_CLIENT_WEBHOOK_PINGED, actor=actor,
                     data={"client": client.name, "event_id": event_id})
        transaction.on_commit(partial(webhook_send, client_id=client.pk, call_id=0, payload=payload))
    return event_id


def webhook_resend(*, client: ApiClient, event_id: str, actor: Actor) -> str:
    """Send one of the client's events again, as it was first sent and under the same id (a receiver that has it
    drops the repeat), from its first attempt: for an event given up, or one a receiver lost."""
    client = _with_webhook(client)
    sent = WebhookDelivery.objects.filter(client=client, event_id=event_id).exclude(payload={}).order_by("started_at")
    delivery = sent.first()
    if delivery is None:
        raise field_error("event_id", "No event with this id was sent to this client (or it predates resending).")
    with transaction.atomic():
        audit_record(action=AuditAction.WEBHOOK_RESENT, actor=actor, call=delivery.call,
                     data={"client": client.name, "event_id": event_id, "event": delivery.event})
        transaction.on_commit(partial(webhook_send, client_id=client.pk, call_id=delivery.call_id or 0,
                                      payload=delivery.payload))
    return event_id


def _with_webhook(client: ApiClient) -> ApiClient:
    """The client as stored now (the API's token cache may hold an older copy), if it has a webhook."""
    client = ApiClient.objects.get(pk=client.pk)
    if not client.is_active or not client.webhook_url:
        raise Conflict("the client has no webhook URL", fields={"webhook_url": ["not set"]})
    return client


def webhook_signature_headers(*, signing_secrets: Sequence[str], event_id: str, timestamp: int,
                              body: bytes) -> dict[str, str]:
    """Standard Webhooks' three headers for ``body`` (UTF-8 JSON), signed by the spec's own library with each
    of ``signing_secrets`` (space-separated signatures: a receiver accepts the event if one of them holds)."""
    signed_at = datetime.fromtimestamp(timestamp, tz=UTC)
    signatures = " ".join(Webhook(secret).sign(event_id, signed_at, body.decode()) for secret in signing_secrets)
    return {"webhook-id": event_id, "webhook-timestamp": str(timestamp), "webhook-signature": signatures}


def webhook_signing_secrets(client: ApiClient) -> list[str]:
    """The client's secret, and the previous one while its overlap after a rotation lasts."""
    until = client.webhook_secret_previous_until
    if client.webhook_secret_previous and until is not None and timezone.now() < until:
        return [client.webhook_secret, client.webhook_secret_previous]
    return [client.webhook_secret]


def webhook_backoff_s(attempt: int) -> float:
    """Seconds before attempt ``attempt + 1``: base, 2·base, 4·base, … capped."""
    triage = settings.TRIAGE
    return min(triage["WEBHOOK_BACKOFF_S"] * 2 ** (attempt - 1), triage["WEBHOOK_BACKOFF_MAX_S"])


def _refused_address(url: str) -> str | None:
    """Why ``url`` may not be called (a non-global address), or None."""
    if settings.TRIAGE["WEBHOOK_ALLOW_PRIVATE_NETWORKS"]:
        return None
    parts = urlsplit(url)
    try:
        infos = socket.getaddrinfo(parts.hostname, parts.port or (443 if parts.scheme == "https" else 80),
                                   type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        return f"cannot resolve {parts.hostname}: {exc}"
    for info in infos:
        address = ipaddress.ip_address(info[4][0].split("%")[0])
        if not address.is_global:
            return f"{parts.hostname} resolves to {address}, not a public address"
    return None


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a 3xx comes back as an HTTPError: a failed attempt


_opener = urllib.request.build_opener(_NoRedirect)


def _post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int | None, str]:
    """(status code, error) of one POST; error is empty for a 2xx."""
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with _opener.open(request, timeout=settings.TRIAGE["WEBHOOK_TIMEOUT_S"]) as response:
            return response.status, ""
    except urllib.error.HTTPError as exc:
        exc.close()
        return exc.code, f"HTTP {exc.code} {exc.reason}"
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return None, f"{type(reason).__name__}: {reason}"


def webhook_deliver(*, client_id: int, call_id: int, payload: dict[str, Any], attempt: int) -> WebhookDelivery:
    """One attempt at one event, recorded whatever happens. ``outcome`` says whether to try again."""
    client = ApiClient.objects.filter(pk=client_id).first()
    started = timezone.now()
    clock = time.monotonic()
    url = client.webhook_url if client is not None else ""
    status_code: int | None = None
    if client is None or not client.is_active or not url:
        error = "the client has no webhook any more" if client is not None else "the client no longer exists"
        outcome = WebhookDelivery.Outcome.SKIPPED
    elif refused := _refused_address(url):
        error, outcome = refused, WebhookDelivery.Outcome.SKIPPED
    else:
        body = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode()
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "triage-webhooks/1",
            "X-Triage-Event": str(payload.get("type", "")),
            "X-Triage-Event-Id": str(payload.get("id", "")),  # = webhook-id, for receivers written before it
            "X-Triage-Attempt": str(attempt),
            **webhook_signature_headers(signing_secrets=webhook_signing_secrets(client), event_id=str(payload.get("id", "")),
                                        timestamp=int(time.time()), body=body),
        }
        status_code, error = _post(url, body, headers)
        if not error:
            outcome = WebhookDelivery.Outcome.DELIVERED
        elif attempt < settings.TRIAGE["WEBHOOK_MAX_ATTEMPTS"]:
            outcome = WebhookDelivery.Outcome.RETRYING
        else:
            outcome = WebhookDelivery.Outcome.GAVE_UP
    if client is None:
        logger.warning("webhook %s for call %s: %s", payload.get("type"), call_id, error)
        return WebhookDelivery(event=str(payload.get("type", "")), attempt=attempt, outcome=outcome, error=error)
    return WebhookDelivery.objects.create(
        client=client, call_id=call_id if Call.objects.filter(pk=call_id).exists() else None,
        event_id=payload.get("id") or uuid.uuid4(), event=str(payload.get("type", ""))[:30], url=url[:URL_MAX_CHARS],
        attempt=attempt, outcome=outcome, status_code=status_code, error=error[:ERROR_MAX_CHARS], payload=payload,
        started_at=started, finished_at=timezone.now(), duration_ms=round((time.monotonic() - clock) * 1000, 1),
    )
