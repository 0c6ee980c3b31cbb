"""Calls: intake (idempotent per client and external id), state transitions, cancellation."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from triage.contracts import Cancel
from triage.metrics import call_accepted
from triage.models import (
    ALLOWED_TRANSITIONS,
    STATUS_TIMESTAMP_FIELD,
    ApiClient,
    AuditAction,
    Call,
    CallStatus,
)
from triage.realtime import call_changed_on_commit
from triage.streams import control_publish_on_commit

from .audit import Actor, SystemActor, audit_record
from .dispatch import send_triage_task, share_guidance_on_commit
from .errors import Conflict, InvalidTransition
from .webhooks import calls_webhook_on_commit

logger = logging.getLogger(__name__)

# Fields a transition may set together with the status (the inference worker's results).
TRANSITION_UPDATABLE_FIELDS = frozenset({
    "guidance", "output_tokens", "failure_reason", "guidance_protocol", "guidance_protocol_version", "guidance_band",
    "off_protocol_sentences", "guidance_brief", "done_at",
})
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
    location_uncertainty_m: float | None = None,
    actor: Actor | None = None,
) -> tuple[Call, bool]:
    """Store a new call (status ``received``) and send it to triage on commit.

    Idempotent on (client, external_id): a retry gets the existing call and ``created=False``, also when
    retries race — the unique constraint decides and the loser reads the winner's row. A different body
    under a used external_id is a ``Conflict`` naming the fields that differ: what a call system learns later
    is an update (``call_updates.call_update_append``), never a silently ignored second post.
    """
    intake = {
        "transcript": transcript, "received_at": received_at.isoformat(), "caller_name": caller_name,
        "caller_phone": caller_phone, "caller_relation": caller_relation, "location_address": location_address,
        "location_lat": location_lat, "location_lon": location_lon, "location_uncertainty_m": location_uncertainty_m,
    }
    call = Call(
        intake=intake,
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
        location_uncertainty_m=location_uncertainty_m,
    )
    try:
        with transaction.atomic():
            call.save(force_insert=True)
            audit_record(
                action=AuditAction.CALL_CREATED,
                actor=actor or client or SystemActor.INTAKE,
                call=call,
                to_status=CallStatus.RECEIVED,
                data={"external_id": external_id},
            )
            transaction.on_commit(lambda: send_triage_task(call.pk))
            transaction.on_commit(call_accepted)
            call_changed_on_commit(call.pk)
    except IntegrityError:
        existing = Call.objects.filter(client=client, external_id=external_id).first()
        if existing is None:  # the violation was not the idempotency key
            raise
        differing = intake_differences(existing, intake)
        if differing:
            raise Conflict(
                f"external_id {external_id!r} was first posted with another {', '.join(differing)}; send what "
                f"changed as an update (POST /api/v1/calls/{existing.pk}/updates/)",
                fields={name: ["differs from the call first posted under this external_id"] for name in differing},
                code="external_id_reused",
            ) from None
        return existing, False
    return call, True


def intake_differences(call: Call, posted: Mapping[str, Any]) -> list[str]:
    """The intake fields in which ``posted`` differs from the body ``call`` was first posted with (its current
    fields for a call stored before intakes were kept); times compare as instants."""
    first = call.intake
    if not first:  # stored before intakes were kept: compare with the call as it stands
        first = {name: getattr(call, name) for name in posted}
        first["received_at"] = call.received_at.isoformat()
    differing = []
    for name, value in posted.items():
        before = first.get(name)
        if name == "received_at":
            same = datetime.fromisoformat(before) == datetime.fromisoformat(value)
        else:
            same = before == value
        if not same:
            differing.append(name)
    return differing


def call_transition_unsaved(call: Call, to_status: str, *, now: datetime) -> list[str]:
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
        changed = call_transition_unsaved(locked, to_status, now=at or timezone.now())
        for name, value in extra.items():
            setattr(locked, name, value)
        locked.save(update_fields=[*changed, *extra])
        audit_record(
            action=AuditAction.entered(to_status),
            actor=actor,
            call=locked,
            from_status=from_status,
            to_status=to_status,
            data=data,
        )
        call_changed_on_commit(locked.pk)
        calls_webhook_on_commit([locked], status=to_status)
        share_guidance_on_commit([locked])
    logger.info("call %s: %s -> %s (%s)", locked.pk, from_status, to_status, actor,
                extra={"call_id": locked.pk, "from_status": from_status, "to_status": to_status})
    for name in (*changed, *extra):
        setattr(call, name, getattr(locked, name))
    return locked


def call_cancel(*, call: Call, actor: Actor, reason: str = "") -> Call:
    """Cancel a call that is not finished yet; the inference worker hears of it on the control channel."""
    with transaction.atomic():
        cancelled = call_transition(
            call=call, to_status=CallStatus.CANCELLED, actor=actor, data={"reason": reason} if reason else None
        )
        control_publish_on_commit(Cancel(call_id=cancelled.pk))
    return cancelled
