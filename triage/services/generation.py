"""Writes of the inference worker: generation state transitions and results, in batches, under the
same rules as ``call_transition`` (row lock, allowed-transition check, audit row, dashboard event on commit).

The worker buffers what happened to each call during a few engine iterations and hands it here in one go:
one transaction per flush, so a burst of 32 calls costs one commit, not 32.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from inference.guidance.plan import GuidancePlan
from triage.models import FINAL_STATUSES, AuditAction, AuditEvent, Call, CallStatus
from triage.realtime import call_changed_on_commit
from triage.services.audit import SystemActor, audit_event_build
from triage.services.calls import call_transition_unsaved
from triage.services.dispatch import share_guidance_on_commit
from triage.services.errors import DomainError
from triage.services.webhooks import calls_webhook_on_commit

logger = logging.getLogger(__name__)
ACTOR = SystemActor.INFERENCE


@dataclass
class CallProgress:
    """What happened to one call since the last flush: status changes in order, each with the time it happened
    in the engine (the call's timestamps say when, not when the flush wrote them), and its result if done."""

    call_id: int
    transitions: list[tuple[str, dict[str, Any], datetime | None]] = field(default_factory=list)
    guidance: str | None = None
    output_tokens: int = 0
    plan: GuidancePlan | None = None  # the plan the guidance was generated under
    generation: int = 0  # the call's guidance generation it belongs to
    off_protocol: int = 0  # sentences the stream guard found off protocol

    def finish(self, *, text: str, output_tokens: int, plan: GuidancePlan | None, generation: int, off_protocol: int,
               at: datetime | None, reason: str, draft_acceptance: float | None = None) -> None:
        """Done: the guidance stored is the model's text, or the protocol's own when any sentence left it.
        ``draft_acceptance``: the share of speculative draft tokens the model accepted (None: none drafted)."""
        self.guidance = plan.text if off_protocol and plan is not None else text
        self.output_tokens, self.plan, self.generation, self.off_protocol = output_tokens, plan, generation, off_protocol
        self.move(CallStatus.DONE, at=at, output_tokens=output_tokens, reason=reason, off_protocol_sentences=off_protocol,
                  **({"protocol": plan.protocol, "protocol_version": plan.protocol_version, "band": plan.band}
                     if plan is not None else {}),
                  **({"draft_acceptance": round(draft_acceptance, 3)} if draft_acceptance is not None else {}))

    def result_fields(self) -> dict[str, Any]:
        plan = self.plan
        return {
            "guidance": self.guidance or "", "output_tokens": self.output_tokens,
            "off_protocol_sentences": self.off_protocol, "guidance_brief": bool(plan and plan.brief),
            "guidance_protocol": plan.protocol if plan else "", "guidance_band": plan.band if plan else "",
            "guidance_protocol_version": plan.protocol_version if plan else None,
        }

    def move(self, to_status: str, *, at: datetime | None = None, **data: Any) -> None:
        if self.transitions and self.transitions[-1][0] == to_status and to_status != CallStatus.PREEMPTED:
            return
        self.transitions.append((to_status, data, at))


def calls_generation_record(*, progress: Iterable[CallProgress]) -> list[int]:
    """Apply buffered transitions and results in one transaction; returns the ids of calls whose result is now
    stored (or that were already final: nothing more to store), i.e. whose stream entries may be acknowledged.

    The calls are locked in one ``SELECT ... FOR UPDATE`` (in id order, as every batch writer locks) and written
    with one ``bulk_update`` and one audit ``bulk_create``: O(1) queries per flush, not per state change. A
    transition the call's current status does not allow (a dispatcher cancelled it meanwhile) is skipped, and so
    is the result of a generation the dispatcher replaced by switching protocol."""
    by_id = {p.call_id: p for p in progress}
    with transaction.atomic():
        locked = list(Call.objects.select_for_update().filter(pk__in=by_id).order_by("pk"))
        stored = [pk for pk in by_id if pk not in {c.pk for c in locked}]  # deleted: nothing to keep
        audits: list[AuditEvent] = []
        changed: set[str] = set()
        moved: dict[str, list[Call]] = defaultdict(list)
        touched: list[Call] = []
        for call in locked:
            statuses = _progress_apply(call, by_id[call.pk], audits, changed)
            for to_status in statuses:
                moved[to_status].append(call)
            if statuses:
                touched.append(call)
            if call.status in FINAL_STATUSES:
                stored.append(call.pk)
        if touched:
            Call.objects.bulk_update(touched, sorted(changed))
            AuditEvent.objects.bulk_create(audits)
        for call in touched:
            call_changed_on_commit(call.pk)
        for to_status, calls in moved.items():
            calls_webhook_on_commit(calls, status=to_status)
        share_guidance_on_commit(touched)
    return stored


def _progress_apply(call: Call, p: CallProgress, audits: list[AuditEvent], changed: set[str]) -> list[str]:
    """Apply one call's buffered transitions to the locked row in memory; returns the statuses it moved to."""
    moved: list[str] = []
    for to_status, data, at in p.transitions:
        if call.status in FINAL_STATUSES:
            break
        if call.status == to_status and to_status != CallStatus.PREEMPTED:
            continue
        updates = _transition_updates(call, p, to_status, data)
        if updates is None:
            break
        from_status = call.status
        try:
            changed.update(call_transition_unsaved(call, to_status, now=at or timezone.now()))
        except DomainError as exc:
            logger.info("call %s: %s -> %s skipped (%s)", call.pk, call.status, to_status, exc,
                        extra={"call_id": call.pk})
            continue
        for name, value in updates.items():
            setattr(call, name, value)
        changed.update(updates)
        audits.append(audit_event_build(action=AuditAction.entered(to_status), actor=ACTOR, call=call, from_status=from_status,
                                        to_status=to_status, data=data or None))
        moved.append(to_status)
        logger.info("call %s: %s -> %s (%s)", call.pk, from_status, to_status, ACTOR,
                    extra={"call_id": call.pk, "from_status": from_status, "to_status": to_status})
    return moved


def _transition_updates(call: Call, p: CallProgress, to_status: str, data: dict[str, Any]) -> dict[str, Any] | None:
    """The fields a transition sets beside the status; None when a result belongs to a replaced generation."""
    if to_status == CallStatus.FAILED:
        return {"failure_reason": str(data.get("error") or data.get("reason") or "")[:300]}
    if to_status == CallStatus.DONE:
        if p.generation != call.guidance_generation:
            logger.info("call %s: result of guidance generation %d not stored (now %d)", call.pk,
                        p.generation, call.guidance_generation, extra={"call_id": call.pk})
            return None
        return p.result_fields()
    return {}
