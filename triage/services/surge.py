"""The surge controller's changes of mode, in the audit log (the inference worker's loop: worker/surge.py)."""

from __future__ import annotations

from collections.abc import Mapping

from triage.models import AuditAction, AuditEvent

from .audit import SystemActor, audit_record


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
