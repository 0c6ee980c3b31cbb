"""Small builders shared by the intake tests."""

from __future__ import annotations

import itertools
from typing import Any

from django.utils import timezone

_ids = itertools.count(1)


def call_payload(**overrides: Any) -> dict[str, Any]:
    n = next(_ids)
    payload = {
        "external_id": f"ext-{n}",
        "received_at": timezone.now().isoformat(),
        "transcript": "My father collapsed in the kitchen and he is not breathing.",
        "caller_name": "Ann Smith",
        "caller_phone": "+44 7700 900123",
        "caller_relation": "relative",
        # each call from another street, kilometres apart: identical calls from one place are one incident
        "location_address": f"{n} High Street, Leeds",
        "location_lat": round(53.0 + (n % 500) * 0.02, 4),
        "location_lon": -1.55,
    }
    payload.update(overrides)
    return payload


def make_call(client: Any = None, **overrides: Any) -> Any:
    from triage.services.calls import call_create

    data = call_payload(**overrides)
    data["received_at"] = timezone.now()
    call, _ = call_create(client=client, **data)
    return call
