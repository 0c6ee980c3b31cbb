"""Calls: intake (idempotent per client and external id), state transitions, cancellation."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from redis import RedisError

from triage.models import ALLOWED_TRANSITIONS, STATUS_TIMESTAMP_FIELD, ApiClient, Call, CallStatus
from triage.realtime import call_changed_on_commit
from triage.streams import control_publish_on_commit, get_redis

from .audit import Actor, audit_record
from .errors import InvalidTransition

logger = logging.getLogger(__name__)

# Fields a transition may set together with the status (the inference worker's results).
TRANSITION_UPDATABLE_FIELDS = frozenset({
    "guidance", "output_tokens", "failure_reason", "guidance_protocol", "guidance_protocol_version", "guidance_band",
    "off_protocol_sentences", "done_at",
})
# Set while a triage task waits in the broker (see ``send_triage_task``).
def triage_task_pending_key(queue: str) -> str:
    """The Redis key that marks a triage task waiting, not yet started, on Celery queue ``queue``."""
    return f"triage:triage-task:pending:{queue}"


TRIAGE_TASK_PENDING_KEY = triage_task_pending_key(settings.CELERY_TASK_DEFAULT_QUEUE)


def call_create(
    *,
    client: ApiClient | None,
    external_id: str,
    received_at: datetime,
    transcript: str,
    caller_name: str = "",
    caller_phone: str = "",
    caller_relation: str = "",
    location_address: str = "",
    location_lat: float | None = None,
    location_lon: float | None = None,
    actor: Actor | None = None,
) -> tuple[Call, bool]:
    """Store a new call (status ``received``) and send it to triage on commit.

    Idempotent on (client, external_id): a retry gets the existing call and ``created=False``, also when
    retries race — the unique constraint decides and the loser reads the winner's row.
    """
    call = Call(
        client=client,
        external_id=external_id,
        received_at=received_at,
        transcript=transcript,
        caller_name=caller_name,
        caller_phone=caller_phone,
        caller_relation=caller_relation,
        location_address=location_address,
        location_lat=location_lat,
        location_lon=location_lon,
    )
    try:
        with transaction.atomic():
            call.save(force_insert=True)
            audit_record(
                action="call.created",
                actor=actor or client or "system:intake",
                call=call,
                to_status=CallStatus.RECEIVED,
                data={"external_id": external_id},
            )
            transaction.on_commit(lambda: send_triage_task(call.pk))
            call_changed_on_commit(call.pk)
    except IntegrityError:
        existing = Call.objects.filter(client=client, external_id=external_id).first()
        if existing is None:  # the violation was not the idempotency key
            raise
        return existing, False
    return call, True


def send_triage_task(call_id: int) -> bool:
    """Hand a call to the Celery triage task; a broker outage is logged, not raised: the sweep re-sends.

    Coalesced: at most one triage task waits in the broker at a time (``TRIAGE_TASK_PENDING_KEY``, set NX
    with a TTL). A task clears the key before it claims calls and then drains every ``received`` call, so a
    call committed while the key was set is claimed by the task that set it: under a burst, one publish
    (~1.5 ms of the web process's CPU) serves many calls. Without Redis the task is sent anyway."""
    from triage.tasks import triage_call  # tasks import services; import here to keep the graph acyclic

    if not _claim_task_slot(call_id):
        return True  # a task that has not started yet will claim this call
    try:
        triage_call.apply_async((call_id,))
    except Exception:  # kombu raises several unrelated types when the broker is away
        logger.warning("triage task for call %s not sent; the sweep will re-send it", call_id, exc_info=True)
        triage_task_started()  # let the next call try to publish
        return False
    return True


def triage_task_started() -> None:
    """A triage task is about to claim calls: calls committed from now on need a task of their own."""
    try:
        get_redis().delete(TRIAGE_TASK_PENDING_KEY)
    except RedisError:
        logger.warning("could not clear %s; it expires by itself", TRIAGE_TASK_PENDING_KEY, exc_info=True)


def _claim_task_slot(call_id: int) -> bool:
    ttl_s = settings.TRIAGE["TRIAGE_TASK_COALESCE_S"]
    if ttl_s <= 0:
        return True
    try:
        return bool(get_redis().set(TRIAGE_TASK_PENDING_KEY, call_id, nx=True, px=int(ttl_s * 1000)))
    except RedisError:
        return True  # the publish will tell whether the broker (the same Redis) is really away


def apply_transition(call: Call, to_status: str, *, now: datetime) -> list[str]:
    """Move a (locked) call to ``to_status`` in memory; returns the changed field names.

    Raises ``InvalidTransition`` for a move ALLOWED_TRANSITIONS does not list.
    """
    if to_status not in ALLOWED_TRANSITIONS.get(call.status, frozenset()):
        raise InvalidTransition(
            f"a {call.status} call cannot become {to_status}",
            fields={"status": [f"cannot go from {call.status} to {to_status}"]},
        )
    call.status = to_status
    call.status_changed_at = now
    changed = ["status", "status_changed_at"]
    stamp = STATUS_TIMESTAMP_FIELD.get(to_status)
    # Repeatable states keep their first timestamp, except the last preemption, which is "last".
    if stamp and (getattr(call, stamp) is None or to_status == CallStatus.PREEMPTED):
        setattr(call, stamp, now)
        changed.append(stamp)
    if to_status == CallStatus.PREEMPTED:
        call.preemption_count += 1
        changed.append("preemption_count")
    return changed


def call_transition(
    *,
    call: Call,
    to_status: str,
    actor: Actor,
    data: Mapping[str, Any] | None = None,
    updates: Mapping[str, Any] | None = None,
    at: datetime | None = None,
) -> Call:
    """Move a call to ``to_status``: row lock, ALLOWED_TRANSITIONS check, timestamp, audit row, dashboard event.

    ``updates`` may set ``guidance``, ``output_tokens`` and ``failure_reason`` with the status; ``at`` is when
    the change happened, if earlier than now (the inference worker writes in batches). The row is
    re-read under ``SELECT ... FOR UPDATE``, so a stale ``call`` instance cannot skip a check; the caller's
    instance is refreshed with the result.
    """
    extra = dict(updates or {})
    unknown = set(extra) - TRANSITION_UPDATABLE_FIELDS
    if unknown:
        raise ValueError(f"call_transition cannot update {sorted(unknown)}")
    with transaction.atomic():
        locked = Call.objects.select_for_update().get(pk=call.pk)
        from_status = locked.status
        changed = apply_transition(locked, to_status, now=at or timezone.now())
        for name, value in extra.items():
            setattr(locked, name, value)
        locked.save(update_fields=[*changed, *extra])
        audit_record(
            action=f"call.{to_status}",
            actor=actor,
            call=locked,
            from_status=from_status,
            to_status=to_status,
            data=data,
        )
        call_changed_on_commit(locked.pk)
    for name in (*changed, *extra):
        setattr(call, name, getattr(locked, name))
    return locked


def call_cancel(*, call: Call, actor: Actor, reason: str = "") -> Call:
    """Cancel a call that is not finished yet; the inference worker hears of it on the control channel."""
    with transaction.atomic():
        cancelled = call_transition(
            call=call, to_status=CallStatus.CANCELLED, actor=actor, data={"reason": reason} if reason else None
        )
        control_publish_on_commit({"kind": "cancel", "call_id": cancelled.pk})
    return cancelled
