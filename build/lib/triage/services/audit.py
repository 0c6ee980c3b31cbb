"""Who did it, and the append-only row that says so."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from triage.models import ApiClient, AuditEvent, Call

# An actor is a user, an API client, or a process named "system:<process>".
Actor = AbstractBaseUser | ApiClient | str

SYSTEM_TRIAGE = "system:triage"


def actor_label(actor: Actor) -> str:
    if isinstance(actor, ApiClient):
        return f"client:{actor.name}"
    if isinstance(actor, str):
        return actor if ":" in actor else f"system:{actor}"
    return f"user:{actor.get_username()}"


def actor_user(actor: Actor) -> Any:
    return actor if isinstance(actor, AbstractBaseUser) else None


def audit_event_build(
    *,
    action: str,
    actor: Actor,
    call: Call | None = None,
    from_status: str = "",
    to_status: str = "",
    data: Mapping[str, Any] | None = None,
) -> AuditEvent:
    """An unsaved audit row (for ``bulk_create`` in batch services)."""
    return AuditEvent(
        call=call,
        action=action,
        from_status=from_status,
        to_status=to_status,
        actor=actor_label(actor)[:150],
        actor_user=actor_user(actor),
        data=dict(data or {}),
    )


def audit_record(**kwargs: Any) -> AuditEvent:
    """Write one audit row; call it inside the transaction of the change it records."""
    event = audit_event_build(**kwargs)
    event.save()
    return event
