"""Calls as the API and the services read them."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db.models import QuerySet

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


def calls_generation_priority(*, call_ids: Iterable[int]) -> dict[int, tuple[int, str] | None]:
    """For the inference worker's intake: each existing call's current (level, tier name; "" without a tier),
    or None when it needs no generation any more (done, failed or cancelled). The stream entry's level is the
    one at enqueue time; a dispatcher's later override is here. Calls that do not exist are absent."""
    rows = Call.objects.filter(pk__in=list(call_ids)).values_list("pk", "status", "level", "tier__name")
    return {pk: None if status in FINAL_STATUSES else (level, tier or "") for pk, status, level, tier in rows}
