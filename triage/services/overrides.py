"""A dispatcher sets the ESI level of a triaged call: overrides it, or confirms one of the two levels an uncertain
verdict named (the call is held at the more urgent until then); the running scheduler re-prioritises at once."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from triage.contracts import Reprioritise
from triage.models import ESI_LEVELS, FINAL_STATUSES, AuditAction, Call, TriageAssessment
from triage.realtime import call_changed_on_commit
from triage.roles import is_dispatcher
from triage.streams import control_publish_on_commit

from .assessments import tier_for_level
from .audit import audit_record
from .errors import Conflict, NotAllowed, field_error
from .webhooks import WebhookEvent, calls_webhook_on_commit

OVERRIDE_REASON_MAX_CHARS = 1000


def call_override_level(
    *, call: Call, level: int, reason: str, user: AbstractBaseUser, disputed_reason: str = ""
) -> Call:
    """Set the call's level to ``level`` for ``reason``; dispatchers (and supervisors) only. ``disputed_reason``
    names which of the assessment's reasons the dispatcher disagrees with ("" for none in particular).

    Publishes ``{"kind": "reprioritise", "call_id", "level", "tier"}`` on the control channel after the commit
    (``tier``: the tier of the new level, "" when no tier claims it).
    """
    _check_override(level=level, reason=reason, user=user)
    with transaction.atomic():
        locked = _locked_open_call(call)
        assessment = TriageAssessment.objects.filter(call=locked).first()
        if assessment is None:
            raise Conflict("the call has not been triaged yet", fields={"esi": ["call not triaged yet"]})
        if disputed_reason and disputed_reason not in assessment.reasons:
            raise field_error("disputed_reason", "Must be one of the assessment's reasons.", code="invalid_choice")
        previous = locked.level
        assessment.override_esi = level
        assessment.overridden_by = user
        assessment.overridden_at = timezone.now()
        assessment.override_reason = reason.strip()
        assessment.override_disputed_reason = disputed_reason
        assessment.save(update_fields=[
            "override_esi", "overridden_by", "overridden_at", "override_reason", "override_disputed_reason",
        ])
        call_level_set(locked, level, reprioritise=True)
        audit_record(
            action=AuditAction.CALL_LEVEL_OVERRIDDEN, actor=user, call=locked,
            data={
                "from_level": previous, "to_level": level, "reason": assessment.override_reason,
                "disputed_reason": disputed_reason, "decision_point": assessment.decision_point,
            },
        )
        calls_webhook_on_commit([locked], event=WebhookEvent.LEVEL_CHANGED, details={
            "from_esi": previous, "change": "override", "by": user.get_username(), "reason": assessment.override_reason})
    call.level, call.tier = locked.level, locked.tier
    return locked


def call_confirm_level(*, call: Call, level: int, user: AbstractBaseUser) -> Call:
    """Confirm ``level``, one of the two an uncertain verdict named (its level or the alternative): the call
    leaves the more urgent level it was held at, or stays there, now confirmed. Dispatchers only; no reason
    asked (a level the dispatcher thinks neither of is an override). Publishes ``reprioritise`` after the commit
    when the level changes."""
    if not is_dispatcher(user):
        raise NotAllowed("only dispatchers may confirm a call's level")
    with transaction.atomic():
        locked = _locked_open_call(call)
        assessment = TriageAssessment.objects.filter(call=locked).first()
        if assessment is None or not assessment.awaiting_confirmation:
            raise Conflict("the call's level is not awaiting confirmation",
                           fields={"esi": ["nothing to confirm: the verdict is certain, or already confirmed"]})
        choices = (assessment.predicted_esi, assessment.alternative_esi)
        if isinstance(level, bool) or level not in choices:
            raise field_error("esi", f"Must be one of the two levels the verdict named: {choices[0]} or {choices[1]}.",
                              code="invalid_choice")
        previous = locked.level
        assessment.level_confirmed_by = user
        assessment.level_confirmed_at = timezone.now()
        assessment.save(update_fields=["level_confirmed_by", "level_confirmed_at"])
        call_level_set(locked, level, reprioritise=level != previous)
        audit_record(
            action=AuditAction.CALL_LEVEL_CONFIRMED, actor=user, call=locked,
            data={"from_level": previous, "to_level": level, "verdict": assessment.predicted_esi,
                  "alternative_esi": assessment.alternative_esi},
        )
        if level != previous:
            calls_webhook_on_commit([locked], event=WebhookEvent.LEVEL_CHANGED, details={
                "from_esi": previous, "change": "confirmation", "by": user.get_username(), "reason": ""})
    call.level, call.tier = locked.level, locked.tier
    return locked


def _locked_open_call(call: Call) -> Call:
    """The call's row, locked for this transaction; a finished call's level is not changed."""
    locked = Call.objects.select_for_update().get(pk=call.pk)
    if locked.status in FINAL_STATUSES:
        raise Conflict(f"a {locked.status} call cannot be re-prioritised", fields={"esi": ["call is finished"]})
    return locked


def call_level_set(locked: Call, level: int, *, reprioritise: bool) -> None:
    """Give a locked call ``level`` and its tier (a dispatcher's change here, a re-triage's raise in
    ``retriage``); on commit the board refreshes and, with ``reprioritise``, the running scheduler gets it."""
    locked.level = level
    locked.tier = tier_for_level(level)
    locked.save(update_fields=["level", "tier"])
    call_changed_on_commit(locked.pk)
    if reprioritise:
        control_publish_on_commit(Reprioritise(call_id=locked.pk, level=level,
                                               tier=locked.tier.name if locked.tier else None))


def _check_override(*, level: int, reason: str, user: AbstractBaseUser) -> None:
    if not is_dispatcher(user):
        raise NotAllowed("only dispatchers may override a call's level")
    if isinstance(level, bool) or level not in ESI_LEVELS:
        raise field_error("esi", "ESI must be an integer from 1 to 5.")
    if not reason or not reason.strip():
        raise field_error("reason", "A reason is required to override the ESI level.", code="required")
    if len(reason) > OVERRIDE_REASON_MAX_CHARS:
        raise field_error("reason", f"At most {OVERRIDE_REASON_MAX_CHARS} characters.")
