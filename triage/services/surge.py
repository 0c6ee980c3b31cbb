"""The surge controller's changes of mode, in the audit log (the inference worker's loop: worker/surge.py)."""

from __future__ import annotations

from collections.abc import Mapping

from triage.models import AuditAction, AuditEvent, Call

from .audit import SystemActor, audit_record


def call_guidance_brief_record(*, call_id: int, level: int | None, generation: int) -> AuditEvent:
    """One ``call.guidance_brief`` row: the call's guidance (this generation) is its protocol's key questions
    only, because the surge controller protects ESI 1-2 (``scheduler.slo.BRIEF_GUIDANCE_LEVELS``)."""
    return audit_record(action=AuditAction.CALL_GUIDANCE_BRIEF, actor=SystemActor.INFERENCE,
                        call=Call(pk=call_id), data={"level": level, "generation": generation, "mode": "protect"})


def surge_mode_record(*, mode: str, previous: str, at_risk: bool, attainment: Mapping[str, Mapping[str, float | None]],
                      extra_slots: int) -> AuditEvent:
    """One ``surge.mode_changed`` row: the new and previous mode, whether a protected call was predicted to miss
    its TTFT target, the protected levels' TTFT and TPOT attainment, and the extra batch slots now open."""
    return audit_record(
        action=AuditAction.SURGE_MODE_CHANGED, actor=SystemActor.INFERENCE,
        data={"mode": mode, "previous": previous, "predicted_risk": at_risk,
              "attainment": {level: dict(shares) for level, shares in attainment.items()},
              "extra_slots": extra_slots},
    )
