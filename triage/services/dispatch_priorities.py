"""Editing the dispatch-priority table (triage/dispatch_priority.py): each change validated, audited with what
the rule now says, and the live calls' board rows refreshed once it commits (they show the priority)."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from triage.models import AuditAction, DispatchPriorityRule
from triage.realtime import mark_calls_dirty
from triage.selectors.queue import live_calls

from .audit import Actor, audit_record


def _described(rule: DispatchPriorityRule) -> dict[str, Any]:
    return {"rule_id": rule.pk, "esi_level": rule.esi_level, "decision_point": rule.decision_point,
            "protocol": rule.protocol, "priority_code": rule.priority_code, "response_mode": rule.response_mode,
            "resources": rule.resources}


def dispatch_rule_save(*, rule: DispatchPriorityRule, actor: Actor) -> DispatchPriorityRule:
    """Create or change a rule (``full_clean`` first: a malformed unit list is refused naming the field)."""
    rule.full_clean()
    with transaction.atomic():
        rule.save()
        audit_record(action=AuditAction.DISPATCH_RULE_SAVED, actor=actor, data=_described(rule))
        transaction.on_commit(lambda: mark_calls_dirty(live_calls().values_list("pk", flat=True)))
    return rule


def dispatch_rule_delete(*, rule: DispatchPriorityRule, actor: Actor) -> None:
    with transaction.atomic():
        described = _described(rule)
        rule.delete()
        audit_record(action=AuditAction.DISPATCH_RULE_DELETED, actor=actor, data=described)
        transaction.on_commit(lambda: mark_calls_dirty(live_calls().values_list("pk", flat=True)))
