"""Side effects towards browsers: Channels group messages, always sent after the transaction commits.

Group sends are at-most-once (DESIGN.md §2b); clients resync from a snapshot when they see a gap.
"""

from __future__ import annotations

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

DASHBOARD_GROUP = "dashboard"


def call_group(call_id: int) -> str:
    return f"call.{call_id}"


def call_changed_on_commit(call_id: int) -> None:
    """Tell dashboards that a call changed, once the current transaction commits."""
    transaction.on_commit(lambda: _send(DASHBOARD_GROUP, {"type": "call.changed", "call_id": call_id}))


def _send(group: str, message: dict) -> None:
    layer = get_channel_layer()
    if layer is not None:
        async_to_sync(layer.group_send)(group, message)
