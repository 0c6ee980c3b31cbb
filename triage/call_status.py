"""A call's statuses, the sets the app reasons with, and which status may follow which: defined here alone.

The board's script receives them from the server (``selectors.queue.board_vocabulary``), never types them.
"""

from __future__ import annotations

from django.db import models


class CallStatus(models.TextChoices):
    """The engine's states; the labels are what a dispatcher reads on the board and in the admin."""

    RECEIVED = "received", "Received, not triaged yet"
    TRIAGED = "triaged", "Triaged"
    QUEUED = "queued", "Waiting for guidance"
    PREFILLING = "prefilling", "Guidance starting"
    DECODING = "decoding", "Guidance streaming"
    PREEMPTED = "preempted", "Guidance paused: a more urgent call first"
    DONE = "done", "Guidance ready"
    FAILED = "failed", "Guidance failed"
    CANCELLED = "cancelled", "Cancelled"


ACTIVE_STATUSES = (
    CallStatus.RECEIVED,
    CallStatus.TRIAGED,
    CallStatus.QUEUED,
    CallStatus.PREFILLING,
    CallStatus.DECODING,
    CallStatus.PREEMPTED,
)
FINAL_STATUSES = (CallStatus.DONE, CallStatus.FAILED, CallStatus.CANCELLED)
# Not put on the inference stream yet: the worker reads the call's plan when it admits it.
BEFORE_STREAM_STATUSES = (CallStatus.RECEIVED, CallStatus.TRIAGED)
# Triaged and put on the inference stream: an entry names the call until its generation ends.
IN_STREAM_STATUSES = (CallStatus.QUEUED, CallStatus.PREFILLING, CallStatus.DECODING, CallStatus.PREEMPTED)
# Ended, and stays on the board until a dispatcher closes it with an outcome.
TO_CLOSE_STATUSES = (CallStatus.DONE, CallStatus.FAILED)
# Whose protocol a dispatcher may still switch (a cancelled or failed call has no guidance to redo).
SWITCHABLE_STATUSES = (*ACTIVE_STATUSES, CallStatus.DONE)
# Ended without guidance: a linked call cannot take its guidance from one of these (services/incidents.py).
ENDED_WITHOUT_GUIDANCE_STATUSES = (CallStatus.FAILED, CallStatus.CANCELLED)

# Which status may follow which; services refuse anything else.
ALLOWED_TRANSITIONS: dict[str, frozenset[str]] = {
    CallStatus.RECEIVED: frozenset({CallStatus.TRIAGED, CallStatus.FAILED, CallStatus.CANCELLED}),
    CallStatus.TRIAGED: frozenset({CallStatus.QUEUED, CallStatus.FAILED, CallStatus.CANCELLED}),
    CallStatus.QUEUED: frozenset({CallStatus.PREFILLING, CallStatus.DECODING, *FINAL_STATUSES}),
    CallStatus.PREFILLING: frozenset({CallStatus.DECODING, CallStatus.PREEMPTED, *FINAL_STATUSES}),
    CallStatus.DECODING: frozenset({CallStatus.PREEMPTED, CallStatus.PREFILLING, *FINAL_STATUSES}),
    CallStatus.PREEMPTED: frozenset({CallStatus.PREFILLING, CallStatus.DECODING, *FINAL_STATUSES}),
    CallStatus.DONE: frozenset({CallStatus.QUEUED}),  # a protocol switch generates the guidance again
    CallStatus.FAILED: frozenset({CallStatus.QUEUED}),  # a supervisor may retry a failed call
    CallStatus.CANCELLED: frozenset(),
}

# The timestamp field stamped when a call enters each status (first entry for repeatable ones).
STATUS_TIMESTAMP_FIELD = {
    CallStatus.TRIAGED: "triaged_at",
    CallStatus.QUEUED: "queued_at",
    CallStatus.PREFILLING: "prefill_started_at",
    CallStatus.DECODING: "first_token_at",
    CallStatus.PREEMPTED: "last_preempted_at",
    CallStatus.DONE: "done_at",
    CallStatus.FAILED: "failed_at",
    CallStatus.CANCELLED: "cancelled_at",
}


class Lifecycle(models.TextChoices):
    """The public lifecycle a call system codes against: stable whatever the scheduler's states become (the
    engine's ``CallStatus`` is reported beside it as a diagnostic)."""

    RECEIVED = "received"  # stored, not classified yet
    TRIAGED = "triaged"  # classified; waiting for its guidance
    GUIDANCE_STREAMING = "guidance_streaming"  # being generated (paused by a more urgent call included)
    GUIDANCE_READY = "guidance_ready"
    FAILED = "failed"
    CANCELLED = "cancelled"
    CLOSED = "closed"  # a dispatcher closed the call with an outcome


LIFECYCLE_OF_STATUS: dict[str, Lifecycle] = {
    CallStatus.RECEIVED: Lifecycle.RECEIVED,
    CallStatus.TRIAGED: Lifecycle.TRIAGED,
    CallStatus.QUEUED: Lifecycle.TRIAGED,
    CallStatus.PREFILLING: Lifecycle.GUIDANCE_STREAMING,
    CallStatus.DECODING: Lifecycle.GUIDANCE_STREAMING,
    CallStatus.PREEMPTED: Lifecycle.GUIDANCE_STREAMING,
    CallStatus.DONE: Lifecycle.GUIDANCE_READY,
    CallStatus.FAILED: Lifecycle.FAILED,
    CallStatus.CANCELLED: Lifecycle.CANCELLED,
}


def lifecycle_of(status: str, *, closed: bool) -> Lifecycle:
    return Lifecycle.CLOSED if closed else LIFECYCLE_OF_STATUS[status]


def statuses_of(lifecycle: str) -> list[str]:
    """The engine states a public lifecycle stage covers (``closed`` is a flag on any final one)."""
    return [status for status, stage in LIFECYCLE_OF_STATUS.items() if stage == lifecycle]
