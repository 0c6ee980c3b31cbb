"""Calls as the API and the services read them."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db.models import F, Max, Q, QuerySet

from inference.guidance.plan import GuidancePlan, brief_plan, guidance_prompt, plan_guidance
from judgment.protocols import UNCLEAR, ProtocolLibrary, load_library
from triage.call_status import Lifecycle, statuses_of
from triage.models import FINAL_STATUSES, ApiClient, AuditEvent, Call, CallStatus, CallUpdate

UNKNOWN_FAMILY = "unknown"  # the family read when a call has no protocol selection (assessed before selection)


def _visible_calls(client: ApiClient | None) -> QuerySet[Call]:
    """All calls for a user with a role; an API client sees only the calls it posted."""
    calls = Call.objects.select_related("tier", "assessment", "assessment__overridden_by")
    return calls.filter(client=client) if client is not None else calls


def call_get(*, call_id: int, client: ApiClient | None = None) -> Call | None:
    return _visible_calls(client).filter(pk=call_id).first()


def call_list(
    *,
    client: ApiClient | None = None,
    statuses: Iterable[str] | None = None,
    levels: Iterable[int] | None = None,
    since: datetime | None = None,
    lifecycles: Iterable[str] | None = None,
    updated_since: datetime | None = None,
    incident: int | None = None,
) -> QuerySet[Call]:
    """Calls, newest first, filtered by status, public lifecycle, level (the dispatcher's override included),
    ``received_at >= since`` and changed at or after ``updated_since``: created then, or with an audit row since
    (every change of a call is audited in its own transaction), for a client reconciling after missed events."""
    calls = _visible_calls(client)
    if statuses:
        calls = calls.filter(status__in=list(statuses))
    if lifecycles:
        wanted = set(lifecycles)
        matched = Q(status__in=[s for stage in wanted for s in statuses_of(stage)], closed_at__isnull=True)
        if Lifecycle.CLOSED in wanted:
            matched |= Q(closed_at__isnull=False)
        calls = calls.filter(matched)
    if updated_since is not None:
        changed = AuditEvent.objects.filter(created_at__gte=updated_since, call__isnull=False).values("call_id")
        calls = calls.filter(Q(created_at__gte=updated_since) | Q(pk__in=changed))
    if levels:
        calls = calls.filter(level__in=list(levels))
    if since is not None:
        calls = calls.filter(received_at__gte=since)
    if incident is not None:
        calls = calls.filter(incident_id=incident)
    return calls.order_by("-created_at", "-id")


def guidance_plan(
    *, protocol: str, family: str, level: int, patient_age: float | None, library: ProtocolLibrary | None = None
) -> GuidancePlan:
    """The plan a call's guidance reads out: its selected (or switched-to) protocol's band for its current
    level, or the family's key questions when the selection is unclear or the protocol is no longer in the
    library."""
    library = library or load_library()
    chosen = library.protocols.get(protocol)
    if chosen is None:
        family = family if family in library.families else UNKNOWN_FAMILY
        return plan_guidance(library, UNCLEAR, family, level, patient_age)
    return plan_guidance(library, chosen.id, chosen.family, level, patient_age)


@dataclass(frozen=True)
class GenerationInput:
    """What the inference worker generates for a call, read from the call itself."""

    level: int | None
    tier: str  # "" without a tier
    prompt: str
    accepted_at_s: float  # Unix seconds: the scheduler's arrival
    predicted_output_tokens: int | None  # None until the call is triaged
    plan: GuidancePlan | None  # what the guidance must read out (the stream guard holds it to this)
    generation: int = 0  # the call's guidance generation: a result of an earlier one is not stored
    client: str = ""  # the call system that sent it (its name; "" for the board's own): fair share within a level
    brief: bool = False  # key questions only: its level was degraded in a surge (``brief_levels``)


def calls_generation_input(
    *, call_ids: Iterable[int], brief_levels: Collection[int] = ()
) -> dict[int, GenerationInput | None]:
    """For the inference worker's intake: each existing call's prompt, current level and tier, arrival and
    predicted length, or None when it needs no generation any more (done, failed or cancelled). Calls that do
    not exist are absent.

    The database, not the stream entry, says what to generate: an entry only says which call is ready. Its level
    is the one at enqueue time (a dispatcher's later override is here), and an entry left in a Redis that
    outlived its database (or that a test run shared) names a call id that may now be another call.

    ``brief_levels``: the levels whose guidance is degraded to the key questions (the surge controller's protect
    mode, worker/surge.py); their predicted length shrinks with the plan's text."""
    rows = Call.objects.filter(pk__in=list(call_ids)).values_list(
        "pk", "status", "level", "tier__name", "transcript", "created_at", "assessment__predicted_output_tokens",
        "assessment__protocol", "assessment__protocol_family", "assessment__patient_age", "guidance_generation",
        "client__name",
    )
    library = load_library()
    out: dict[int, GenerationInput | None] = {}
    for pk, status, level, tier, transcript, created_at, predicted, protocol, family, age, generation, client in rows:
        if status in FINAL_STATUSES:
            out[pk] = None
            continue
        plan = None if level is None else guidance_plan(protocol=protocol or "", family=family or "", level=level,
                                                        patient_age=age, library=library)
        brief = False
        if plan is not None and level in brief_levels:
            shorter = brief_plan(library, plan, level, age)
            if len(shorter.text) < len(plan.text):  # a band shorter than its key questions stays as it is
                if predicted:
                    predicted = max(1, round(predicted * len(shorter.text) / len(plan.text)))
                plan, brief = shorter, True
        out[pk] = GenerationInput(
            level=level, tier=tier or "", prompt=guidance_prompt(plan, transcript) if plan else "",
            accepted_at_s=created_at.timestamp(), predicted_output_tokens=predicted, plan=plan, generation=generation,
            client=client or "", brief=brief,
        )
    return out


def call_updates(*, call: Call) -> QuerySet[CallUpdate]:
    """The updates the call system sent for ``call``, oldest first."""
    return CallUpdate.objects.filter(call=call).order_by("created_at", "pk")


def calls_with_unread_narrative(*, updated_before: datetime, limit: int) -> list[int]:
    """Calls whose assessment read an older narrative than they have (their re-triage task was lost), last
    updated before ``updated_before`` (newer ones are left to their own task); open calls only, oldest first."""
    return list(
        Call.objects.filter(assessment__narrative_revision__lt=F("narrative_revision"), closed_at__isnull=True)
        .exclude(status=CallStatus.CANCELLED)
        .annotate(last_update=Max("updates__created_at")).filter(last_update__lt=updated_before)
        .order_by("last_update").values_list("pk", flat=True)[:limit]
    )


def guidance_sources_ended(*, limit: int) -> list[int]:
    """Ended calls that linked calls still wait on (their sharing task was lost): the sweep settles them."""
    return list(
        Call.objects.filter(guidance_followers__status=CallStatus.QUEUED, status__in=FINAL_STATUSES)
        .distinct().order_by("pk").values_list("pk", flat=True)[:limit]
    )


def incident_calls(call: Call) -> list[Call]:
    """The other calls of ``call``'s incident, oldest first ([] when it is not linked)."""
    if call.incident_id is None:
        return []
    return list(Call.objects.filter(incident_id=call.incident_id).exclude(pk=call.pk).order_by("pk"))
