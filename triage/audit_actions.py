"""What an audit row records: each kind of change, named once (``AuditEvent.action``'s choices)."""

from __future__ import annotations

from django.db import models


class AuditAction(models.TextChoices):
    """What an audit row records: each kind of change, named once."""

    CALL_CREATED = "call.created"
    CALL_TRIAGED = "call.triaged"
    CALL_QUEUED = "call.queued"
    CALL_PREFILLING = "call.prefilling"
    CALL_DECODING = "call.decoding"
    CALL_PREEMPTED = "call.preempted"
    CALL_DONE = "call.done"
    CALL_FAILED = "call.failed"
    CALL_CANCELLED = "call.cancelled"
    CALL_LEVEL_OVERRIDDEN = "call.level_overridden"
    CALL_LEVEL_CONFIRMED = "call.level_confirmed"
    CALL_PROTOCOL_SWITCHED = "call.protocol_switched"
    CALL_UPDATED = "call.updated"  # the call system sent narrative, a location or a callback number
    CALL_RETRIAGED = "call.retriaged"  # new narrative was read again (the level raised, kept, or held)
    CALL_ACKNOWLEDGED = "call.acknowledged"
    CALL_ESCALATED = "call.escalated"  # not acknowledged within its tier's time: the supervisors' to act on
    CALL_ASSIGNED = "call.assigned"  # claimed by a dispatcher, assigned or released
    CALL_LINKED = "call.linked"  # proposed as a call about the same incident as another
    CALL_LINK_CONFIRMED = "call.link_confirmed"
    CALL_LINK_SPLIT = "call.link_split"
    CALL_GUIDANCE_BRIEF = "call.guidance_brief"  # key questions only: the surge controller protects ESI 1-2
    CALL_GUIDANCE_UNSHARED = "call.guidance_unshared"  # generates its own guidance (split, switch, source failed)
    CALL_CLOSED = "call.closed"
    API_CLIENT_CREATED = "api_client.created"
    API_CLIENT_ROTATED = "api_client.rotated"
    API_CLIENT_DEACTIVATED = "api_client.deactivated"
    API_CLIENT_WEBHOOK_SET = "api_client.webhook_set"
    API_CLIENT_WEBHOOK_SECRET_ROTATED = "api_client.webhook_secret_rotated"
    API_CLIENT_SHARE_SET = "api_client.share_set"  # its fair-share weight among call systems
    SCHEDULER_SETTINGS_UPDATED = "scheduler_settings.updated"
    SURGE_MODE_CHANGED = "surge.mode_changed"
    TIER_CREATED = "tier.created"
    TIER_UPDATED = "tier.updated"
    TIER_DELETED = "tier.deleted"
    API_CLIENT_WEBHOOK_PINGED = "api_client.webhook_pinged"
    WEBHOOK_RESENT = "webhook.resent"
    DISPATCH_RULE_SAVED = "dispatch_rule.saved"
    DISPATCH_RULE_DELETED = "dispatch_rule.deleted"

    @classmethod
    def entered(cls, status: str) -> AuditAction:
        """The action of a call's move into ``status``."""
        return cls(f"call.{status}")
