"""The dispatch domain: calls, their triage and updates, the centre's configuration, API clients and the
append-only records. One module per concept; everything is importable from ``triage.models``."""

from scheduler.config import ESI_LEVELS
from triage.audit_actions import AuditAction
from triage.call_status import (
    ACTIVE_STATUSES,
    ALLOWED_TRANSITIONS,
    BEFORE_STREAM_STATUSES,
    ENDED_WITHOUT_GUIDANCE_STATUSES,
    FINAL_STATUSES,
    IN_STREAM_STATUSES,
    STATUS_TIMESTAMP_FIELD,
    SWITCHABLE_STATUSES,
    TO_CLOSE_STATUSES,
    CallStatus,
    Lifecycle,
    lifecycle_of,
)
from triage.decision_points import DecisionPoint

from .calls import Call, TriageAssessment
from .clients import ApiClient
from .config import ESI_VALIDATORS, DispatchPriorityRule, SchedulerSettings, Tier
from .incidents import Incident
from .records import AuditEvent, AuditEventQuerySet, WebhookDelivery
from .updates import CallUpdate

__all__ = [
    "ACTIVE_STATUSES", "ALLOWED_TRANSITIONS", "BEFORE_STREAM_STATUSES", "ENDED_WITHOUT_GUIDANCE_STATUSES", "ESI_LEVELS", "ESI_VALIDATORS",
    "FINAL_STATUSES", "IN_STREAM_STATUSES", "STATUS_TIMESTAMP_FIELD", "SWITCHABLE_STATUSES", "TO_CLOSE_STATUSES",
    "ApiClient", "AuditAction", "AuditEvent", "AuditEventQuerySet", "Call", "CallUpdate", "CallStatus", "DecisionPoint",
    "DispatchPriorityRule", "Incident", "Lifecycle", "SchedulerSettings", "Tier", "TriageAssessment", "WebhookDelivery",
    "lifecycle_of",
]
