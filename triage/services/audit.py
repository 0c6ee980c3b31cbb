"""Who did it, and the append-only row that says so."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from triage.models import ApiClient, AuditAction, AuditEvent, Call

# An actor is a user, an API client, or a process named "system:<process>".
Actor = AbstractBaseUser | ApiClient | str


class SystemActor(StrEnum):
    """The processes that change calls or settings on their own account."""

    INTAKE = "system:intake"  # a call accepted without a client (tests, the demo's own calls)
    TRIAGE = "system:triage"  # the Celery triage tasks
    INFERENCE = "system:inference"  # the inference worker's status changes
    CLI = "system:cli"  # management commands and the shell
    MANAGE = "system:manage.py"  # create_api_client


SYSTEM_TRIAGE = SystemActor.TRIAGE


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
    action: AuditAction,
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
