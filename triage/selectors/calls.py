"""Calls as the API and the services read them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db.models import QuerySet

from inference.guidance_corpus import guidance_prompt
from triage.models import FINAL_STATUSES, ApiClient, Call


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
) -> QuerySet[Call]:
    """Calls, newest first, filtered by status, effective ESI level (override included) and ``received_at >= since``."""
    calls = _visible_calls(client)
    if statuses:
        calls = calls.filter(status__in=list(statuses))
    if levels:
        calls = calls.filter(level__in=list(levels))
    if since is not None:
        calls = calls.filter(received_at__gte=since)
    return calls.order_by("-created_at", "-id")


@dataclass(frozen=True)
class GenerationInput:
    """What the inference worker generates for a call, read from the call itself."""

    level: int | None
    tier: str  # "" without a tier
    prompt: str
    accepted_at_s: float  # Unix seconds: the scheduler's arrival
    predicted_output_tokens: int | None  # None until the call is triaged


def calls_generation_input(*, call_ids: Iterable[int]) -> dict[int, GenerationInput | None]:
    """For the inference worker's intake: each existing call's prompt, current level and tier, arrival and
    predicted length, or None when it needs no generation any more (done, failed or cancelled). Calls that do
    not exist are absent.

    The database, not the stream entry, says what to generate: an entry only says which call is ready. Its level
    is the one at enqueue time (a dispatcher's later override is here), and an entry left in a Redis that
    outlived its database (or that a test run shared) names a call id that may now be another call."""
    rows = Call.objects.filter(pk__in=list(call_ids)).values_list(
        "pk", "status", "level", "tier__name", "transcript", "created_at", "assessment__predicted_output_tokens",
    )
    return {
        pk: None if status in FINAL_STATUSES else GenerationInput(
            level=level, tier=tier or "", prompt=guidance_prompt(transcript), accepted_at_s=created_at.timestamp(),
            predicted_output_tokens=predicted,
        )
        for pk, status, level, tier, transcript, created_at, predicted in rows
    }
