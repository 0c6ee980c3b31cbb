"""Calls that evolve: the call system sends what it learned after posting a call — more of what the caller
says, a better location (a rebid, with its uncertainty), a callback number. Each update is stored as posted,
applied to the call in the same transaction, and audited; new narrative is read again by the triage queue
(``retriage.call_retriage``), which may raise the level at once but never lowers it on its own.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction

from triage.models import AuditAction, Call, CallStatus, CallUpdate, TriageAssessment
from triage.realtime import call_changed_on_commit

from .audit import Actor, audit_record
from .dispatch import send_retriage_task
from .errors import Conflict, field_error

# Updates only ever grow the transcript; this bounds what the classifier and the LLM's prompt are given.
NARRATIVE_MAX_UPDATES_CHARS_FACTOR = 4
LOCATION_FIELDS = ("location_address", "location_lat", "location_lon", "location_uncertainty_m")


def narrative_max_chars() -> int:
    """The longest a call's transcript may grow to through updates."""
    return settings.TRIAGE["TRANSCRIPT_MAX_CHARS"] * NARRATIVE_MAX_UPDATES_CHARS_FACTOR


def call_update_append(
    *,
    call: Call,
    update_id: str,
    received_at: datetime,
    actor: Actor,
    narrative: str = "",
    location_address: str = "",
    location_lat: float | None = None,
    location_lon: float | None = None,
    location_uncertainty_m: float | None = None,
    callback_number: str = "",
) -> tuple[CallUpdate, bool]:
    """Store and apply one update; ``(update, created)``. Idempotent per (call, update_id): a retry gets the
    stored update and ``created=False``, a different update under a used id is a ``Conflict`` naming the fields.

    Narrative is appended to the transcript as a new line and bumps ``Call.narrative_revision``; a call that
    has been triaged is read again on commit. A location replaces the fields it gives; a callback number
    becomes the caller's phone. A cancelled or closed call takes no updates.
    """
    posted: dict[str, Any] = {
        "received_at": received_at, "narrative": narrative, "location_address": location_address,
        "location_lat": location_lat, "location_lon": location_lon, "location_uncertainty_m": location_uncertainty_m,
        "callback_number": callback_number,
    }
    with transaction.atomic():
        locked = Call.objects.select_for_update().get(pk=call.pk)
        stored = CallUpdate.objects.filter(call=locked, update_id=update_id).first()
        if stored is not None:
            differing = [name for name, value in posted.items() if getattr(stored, name) != value]
            if differing:
                raise Conflict(
                    f"update {update_id!r} was first posted with another {', '.join(differing)}",
                    fields={name: ["differs from the update first posted under this update_id"] for name in differing},
                    code="update_id_reused",
                )
            return stored, False
        if locked.status == CallStatus.CANCELLED or locked.closed_at is not None:
            raise Conflict(f"a {'closed' if locked.closed_at else 'cancelled'} call takes no updates",
                           fields={"update_id": ["the call is finished"]})
        changed = _apply(locked, posted)
        update = CallUpdate.objects.create(
            call=locked, update_id=update_id, **posted,
            narrative_revision=locked.narrative_revision if narrative else None,
        )
        audit_record(
            action=AuditAction.CALL_UPDATED, actor=actor, call=locked,
            data={"update_id": update_id, "fields": sorted(changed), "narrative_revision": locked.narrative_revision},
        )
        call_changed_on_commit(locked.pk)
        # A call still waiting for its first verdict is read whole by the triage task: the task holds the row
        # lock from claiming the call to recording it, so it cannot have read the narrative before this line.
        if narrative and TriageAssessment.objects.filter(call=locked).exists():
            transaction.on_commit(lambda: send_retriage_task(locked.pk))
    return update, True


def _apply(locked: Call, posted: dict[str, Any]) -> set[str]:
    """Write the update onto the call; the names of the call's fields it changed."""
    changed: set[str] = set()
    if posted["narrative"]:
        transcript = f"{locked.transcript}\n{posted['narrative']}"
        if len(transcript) > narrative_max_chars():
            raise field_error(
                "narrative", f"The call's transcript would exceed {narrative_max_chars()} characters with this update.")
        locked.transcript = transcript
        locked.narrative_revision += 1
        changed |= {"transcript", "narrative_revision"}
    for name in LOCATION_FIELDS:
        if posted[name] not in ("", None):
            setattr(locked, name, posted[name])
            changed.add(name)
    if posted["callback_number"]:
        locked.caller_phone = posted["callback_number"]
        changed.add("caller_phone")
    if changed:
        locked.save(update_fields=sorted(changed))
    return changed
