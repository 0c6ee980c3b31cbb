"""Linked calls: many callers, one incident.

When the triage worker records a verdict it proposes a link to the open call the rule names
(``judgment/incident_links.py``: close in time and place, and in words); the two join one ``Incident``. Each
linked call keeps its own triage (its caller may describe a different patient state). The guidance is generated
once per incident and protocol: a linked call whose protocol is that of an earlier call of the incident follows
it (``Call.guidance_source``). It is queued without an inference-stream entry and, when its source is done,
takes the source's guidance (``incident_guidance_settle``); if the source fails or is cancelled, or a dispatcher
splits the call out or switches its protocol, it generates its own.

A dispatcher confirms a proposed link or splits the call out; a split call is never linked again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from datetime import timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from judgment.incident_links import DEFAULT_RULE, CallForLinking, best_link, link_score
from triage.models import (
    ENDED_WITHOUT_GUIDANCE_STATUSES,
    FINAL_STATUSES,
    AuditAction,
    Call,
    CallStatus,
    Incident,
    TriageAssessment,
)
from triage.realtime import call_changed_on_commit
from triage.roles import is_dispatcher
from triage.streams import stream_append_many

from .assessments import inference_entry
from .audit import SYSTEM_TRIAGE, Actor, audit_record
from .calls import call_transition
from .errors import Conflict, NotAllowed
from .recovery import call_requeue

logger = logging.getLogger(__name__)

CANDIDATES_MAX = 200  # the most recent open calls a new call is compared with
# What a follower takes of its source's result (the rest of the call is its own).
SHARED_FIELDS = ("guidance", "guidance_protocol", "guidance_protocol_version", "guidance_band", "off_protocol_sentences",
                 "guidance_brief")


def for_linking(call: Call) -> CallForLinking:
    return CallForLinking(id=call.pk, received_s=call.received_at.timestamp(), text=call.transcript,
                          lat=call.location_lat, lon=call.location_lon, uncertainty_m=call.location_uncertainty_m,
                          address=call.location_address).with_words()


def calls_link(calls: Sequence[Call], assessments: dict[int, TriageAssessment]) -> None:
    """Inside the transaction that records ``calls``' verdicts (``assessments`` by call id): link each, in
    arrival order, to an earlier open call about the same incident, and have it follow the incident's guidance
    of its protocol. O(calls x CANDIDATES_MAX) comparisons."""
    gap = timedelta(seconds=DEFAULT_RULE.max_gap_s)
    for call in sorted(calls, key=lambda c: c.pk):
        if call.incident_split:
            continue
        candidates = list(
            Call.objects.filter(pk__lt=call.pk, received_at__gte=call.received_at - gap,
                                received_at__lte=call.received_at + gap, closed_at__isnull=True, incident_split=False,
                                level__isnull=False)
            .exclude(status=CallStatus.CANCELLED).select_related("incident").order_by("-pk")[:CANDIDATES_MAX]
        )
        if not candidates:
            continue
        mine = for_linking(call)
        linkable = {c.pk: for_linking(c) for c in candidates}
        target_id = best_link(mine, linkable.values())
        if target_id is None:
            continue
        target = next(c for c in candidates if c.pk == target_id)
        if target.incident is None:
            target.incident = Incident.objects.create()
            target.save(update_fields=["incident"])
            call_changed_on_commit(target.pk)
        call.incident = target.incident
        call.guidance_source = _guidance_source(call, assessments[call.pk])
        call.save(update_fields=["incident", "guidance_source"])
        audit_record(action=AuditAction.CALL_LINKED, actor=SYSTEM_TRIAGE, call=call, data={
            "incident": call.incident_id, "with": target.pk,
            "similarity": round(link_score(mine, linkable[target_id]) or 0.0, 3),
            "guidance_from": call.guidance_source_id})


def _guidance_source(call: Call, assessment: TriageAssessment) -> Call | None:
    """The incident's first call of the same protocol that generates its own guidance and has not failed."""
    return (Call.objects.filter(incident=call.incident, guidance_source__isnull=True, pk__lt=call.pk,
                                assessment__protocol=assessment.protocol,
                                assessment__protocol_family=assessment.protocol_family)
            .exclude(status__in=ENDED_WITHOUT_GUIDANCE_STATUSES).order_by("pk").first())


def incident_guidance_settle(*, source_ids: Iterable[int]) -> int:
    """Calls waiting on a source that has ended: a ``done`` source's guidance is theirs (``queued → done``,
    no model work); a failed or cancelled one's followers generate their own. Returns how many were settled."""
    settled = 0
    for source in Call.objects.filter(pk__in=list(source_ids), status__in=FINAL_STATUSES):
        for follower in Call.objects.filter(guidance_source=source, status=CallStatus.QUEUED).order_by("pk"):
            if source.status == CallStatus.DONE:
                call_transition(call=follower, to_status=CallStatus.DONE, actor=SYSTEM_TRIAGE,
                                data={"shared_from": source.pk},
                                updates={**{name: getattr(source, name) for name in SHARED_FIELDS},
                                         "output_tokens": 0, "done_at": timezone.now()})
            else:
                call_guidance_unshare(call=follower, actor=SYSTEM_TRIAGE, reason=f"its source call {source.status}")
            settled += 1
    return settled


def call_guidance_unshare(*, call: Call, actor: Actor, reason: str) -> None:
    """``call`` generates its own guidance from now on: a waiting follower gets its inference-stream entry; a
    call others follow lets them generate their own too."""
    with transaction.atomic():
        locked = Call.objects.select_for_update(of=("self",)).select_related("tier", "assessment").get(pk=call.pk)
        if locked.guidance_source_id is not None:
            source = locked.guidance_source_id
            locked.guidance_source = None
            locked.save(update_fields=["guidance_source"])
            audit_record(action=AuditAction.CALL_GUIDANCE_UNSHARED, actor=actor, call=locked,
                         data={"from": source, "reason": reason})
            if locked.status == CallStatus.QUEUED:
                stream_append_many([inference_entry(locked, enqueued_at=timezone.now().timestamp())])
            call_changed_on_commit(locked.pk)
        followers = list(Call.objects.filter(guidance_source=locked, status=CallStatus.QUEUED))
    for follower in followers:
        call_guidance_unshare(call=follower, actor=actor, reason=f"call {locked.pk} {reason}")


def call_incident_confirm(*, call: Call, user: AbstractBaseUser) -> Call:
    """A dispatcher confirms that ``call`` is about its incident."""
    _require_dispatcher(user)
    with transaction.atomic():
        locked = Call.objects.select_for_update().get(pk=call.pk)
        if locked.incident_id is None:
            raise Conflict(f"call {locked.pk} is not linked", fields={"incident": ["not linked"]})
        if locked.incident_confirmed_at is None:
            locked.incident_confirmed_by, locked.incident_confirmed_at = user, timezone.now()
            locked.save(update_fields=["incident_confirmed_by", "incident_confirmed_at"])
            audit_record(action=AuditAction.CALL_LINK_CONFIRMED, actor=user, call=locked,
                         data={"incident": locked.incident_id})
            call_changed_on_commit(locked.pk)
    return locked


def call_incident_split(*, call: Call, user: AbstractBaseUser) -> Call:
    """A dispatcher says ``call`` is about another event: it leaves the incident, is never linked again, and
    generates its own guidance (again, if it had taken another call's)."""
    _require_dispatcher(user)
    with transaction.atomic():
        locked = Call.objects.select_for_update().get(pk=call.pk)
        if locked.incident_id is None:
            raise Conflict(f"call {locked.pk} is not linked", fields={"incident": ["not linked"]})
        incident, shared = locked.incident_id, locked.guidance_source_id
        locked.incident, locked.incident_split = None, True
        locked.incident_confirmed_by, locked.incident_confirmed_at = None, None
        locked.save(update_fields=["incident", "incident_split", "incident_confirmed_by", "incident_confirmed_at"])
        audit_record(action=AuditAction.CALL_LINK_SPLIT, actor=user, call=locked, data={"incident": incident})
        call_changed_on_commit(locked.pk)
        if shared is not None and locked.status == CallStatus.DONE:
            locked.guidance_source = None  # the guidance it took was read for the other event's caller
            locked.save(update_fields=["guidance_source"])
            call_requeue(call=locked, actor=user, reason="split from its incident")
        else:
            call_guidance_unshare(call=locked, actor=user, reason="split from its incident")
    return locked


def _require_dispatcher(user: AbstractBaseUser) -> None:
    if not is_dispatcher(user):
        raise NotAllowed("only dispatchers and supervisors may confirm or split linked calls")
