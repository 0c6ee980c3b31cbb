"""Dispatcher actions on the board that are not call-lifecycle transitions: acknowledge and close; and the
escalation of calls nobody acknowledged in time.

Like every service: keyword-only arguments, one transaction, the audit row in it (naming the
actor), the dashboard event on commit.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from triage.models import FINAL_STATUSES, AuditAction, Call, CallStatus
from triage.realtime import call_changed_on_commit
from triage.roles import is_dispatcher

from .audit import SystemActor, audit_record
from .errors import Conflict, NotAllowed, field_error
from .webhooks import WebhookEvent, calls_webhook_on_commit

OUTCOME_MAX_CHARS = 200


def _require_dispatcher(user: object) -> None:
    if not is_dispatcher(user):
        raise NotAllowed("only dispatchers and supervisors may act on calls")


def call_acknowledge(*, call: Call, user: object) -> Call:
    """Record that a dispatcher has seen a call (idempotent: the first acknowledgement stands)."""
    _require_dispatcher(user)
    with transaction.atomic():
        locked = Call.objects.select_for_update().get(pk=call.pk)
        if locked.acknowledged_at is not None:
            return locked
        locked.acknowledged_at = timezone.now()
        locked.acknowledged_by = user
        locked.save(update_fields=["acknowledged_at", "acknowledged_by"])
        audit_record(action=AuditAction.CALL_ACKNOWLEDGED, actor=user, call=locked, data={})
        call_changed_on_commit(locked.pk)
        calls_webhook_on_commit([locked], event=WebhookEvent.ACKNOWLEDGED, details={
            "acknowledged_at": locked.acknowledged_at.isoformat(), "by": user.get_username()})
    return locked


def call_close(*, call: Call, user: object, outcome: str) -> Call:
    """Close a finished call with its outcome; it leaves the live board and stays searchable.

    Only a call whose generation has ended (done, failed or cancelled) can be closed: an active call
    is cancelled first.
    """
    _require_dispatcher(user)
    outcome = (outcome or "").strip()
    if not outcome:
        raise field_error("outcome", "say what happened to the call")
    if len(outcome) > OUTCOME_MAX_CHARS:
        raise field_error("outcome", f"at most {OUTCOME_MAX_CHARS} characters")
    with transaction.atomic():
        locked = Call.objects.select_for_update().get(pk=call.pk)
        if locked.closed_at is not None:
            raise Conflict("this call is already closed", fields={"outcome": ["already closed"]})
        if locked.status not in FINAL_STATUSES:
            raise Conflict(
                f"a {locked.status} call cannot be closed; cancel it first",
                fields={"status": [f"cannot close a {locked.status} call"]},
            )
        locked.closed_at = timezone.now()
        locked.outcome = outcome
        locked.save(update_fields=["closed_at", "outcome"])
        audit_record(action=AuditAction.CALL_CLOSED, actor=user, call=locked, data={"outcome": outcome})
        call_changed_on_commit(locked.pk)
        calls_webhook_on_commit([locked], event=WebhookEvent.CLOSED, details={
            "closed_at": locked.closed_at.isoformat(), "outcome": outcome, "by": user.get_username()})
    return locked


def calls_escalate_overdue(*, now: datetime | None = None) -> list[int]:
    """Record every open, unacknowledged call whose tier's ``acknowledge_within_s`` has passed since its triage:
    ``escalated_at`` and an audit row (``call.escalated``), once per call; the boards show it from the server
    (each board also computes it between sweeps). The periodic sweep runs this. Returns the calls escalated."""
    now = now or timezone.now()
    candidates = (Call.objects.filter(acknowledged_at__isnull=True, escalated_at__isnull=True, closed_at__isnull=True,
                                      triaged_at__isnull=False, tier__acknowledge_within_s__gt=0)
                  .exclude(status=CallStatus.CANCELLED).select_related("tier"))
    overdue = {c.pk: c.tier.acknowledge_within_s for c in candidates
               if now - c.triaged_at > timedelta(seconds=c.tier.acknowledge_within_s)}
    escalated = []
    for pk, within_s in overdue.items():
        with transaction.atomic():
            locked = Call.objects.select_for_update().get(pk=pk)
            if locked.acknowledged_at is not None or locked.escalated_at is not None:
                continue  # acknowledged (or escalated) meanwhile
            locked.escalated_at = now
            locked.save(update_fields=["escalated_at"])
            audit_record(action=AuditAction.CALL_ESCALATED, actor=SystemActor.TRIAGE, call=locked,
                         data={"acknowledge_within_s": within_s, "level": locked.level})
            call_changed_on_commit(locked.pk)
        escalated.append(pk)
    return escalated
