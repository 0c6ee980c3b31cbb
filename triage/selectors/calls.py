"""Calls as the API and the services read them."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db.models import QuerySet

from triage.models import ApiClient, Call


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
