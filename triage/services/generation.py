"""Writes of the inference worker: generation state transitions and results, in batches, through
``call_transition`` (row lock, allowed-transition check, audit row, dashboard event on commit).

The worker buffers what happened to each call during a few engine iterations and hands it here in one go:
one transaction per flush, so a burst of 32 calls costs one commit, not 32.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction

from inference.guidance.plan import GuidancePlan
from triage.models import FINAL_STATUSES, Call, CallStatus, SchedulerSettings
from triage.selectors.scheduler import scheduler_config_load as scheduler_config_load  # the worker's import
from triage.services.calls import call_transition
from triage.services.errors import DomainError

logger = logging.getLogger(__name__)
ACTOR = "system:inference"


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
               at: datetime | None, reason: str) -> None:
        """Done: the guidance stored is the model's text, or the protocol's own when any sentence left it."""
        self.guidance = plan.text if off_protocol and plan is not None else text
        self.output_tokens, self.plan, self.generation, self.off_protocol = output_tokens, plan, generation, off_protocol
        self.move(CallStatus.DONE, at=at, output_tokens=output_tokens, reason=reason, off_protocol_sentences=off_protocol,
                  **({"protocol": plan.protocol, "protocol_version": plan.protocol_version, "band": plan.band}
                     if plan is not None else {}))

    def result_fields(self) -> dict[str, Any]:
        plan = self.plan
        return {
            "guidance": self.guidance or "", "output_tokens": self.output_tokens,
            "off_protocol_sentences": self.off_protocol,
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

    A transition the call's current status does not allow (a dispatcher cancelled it meanwhile) is skipped, and
    so is the result of a generation the dispatcher replaced by switching protocol."""
    stored: list[int] = []
    with transaction.atomic():
        for p in progress:
            call = Call.objects.filter(pk=p.call_id).first()
            if call is None:
                stored.append(p.call_id)  # deleted: nothing to keep
                continue
            for to_status, data, at in p.transitions:
                if call.status in FINAL_STATUSES:
                    break
                if call.status == to_status and to_status != CallStatus.PREEMPTED:
                    continue
                updates = None
                if to_status == CallStatus.FAILED:
                    updates = {"failure_reason": str(data.get("error") or data.get("reason") or "")[:300]}
                if to_status == CallStatus.DONE:
                    if p.generation != call.guidance_generation:
                        logger.info("call %s: result of guidance generation %d not stored (now %d)", call.pk,
                                    p.generation, call.guidance_generation, extra={"call_id": call.pk})
                        break
                    updates = p.result_fields()
                try:
                    call_transition(
                        call=call, to_status=to_status, actor=ACTOR, data=data or None, updates=updates, at=at
                    )
                except DomainError as exc:
                    logger.info("call %s: %s -> %s skipped (%s)", call.pk, call.status, to_status, exc,
                                extra={"call_id": call.pk})
            if call.status in FINAL_STATUSES:
                stored.append(call.pk)
    return stored


def guard_similarity_threshold_load() -> float | None:
    """The stream guard's mode from the settings: None is strict (the protocol's own sentences only)."""
    return SchedulerSettings.load().guard_similarity_threshold
