"""Append-only records: the audit log and webhook deliveries."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from triage.audit_actions import AuditAction

from .calls import Call
from .clients import ApiClient


class AuditEventQuerySet(models.QuerySet):
    def update(self, **kwargs):  # noqa: ANN003
        raise PermissionError("the audit log is append-only")

    def delete(self):
        raise PermissionError("the audit log is append-only")


class AuditEvent(models.Model):
    """Append-only record of every state change and override, with its actor."""

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    call = models.ForeignKey(Call, on_delete=models.PROTECT, null=True, blank=True, related_name="audit_events")
    action = models.CharField(max_length=50, choices=AuditAction.choices, db_index=True)
    from_status = models.CharField(max_length=20, blank=True)
    to_status = models.CharField(max_length=20, blank=True)
    actor = models.CharField(max_length=150, help_text="user:<name>, client:<name> or system:<process>")
    actor_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    data = models.JSONField(default=dict, blank=True)

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.actor} {self.action}"

    def save(self, *args, **kwargs):  # noqa: ANN002, ANN003
        if self.pk is not None:
            raise PermissionError("the audit log is append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):  # noqa: ANN002, ANN003
        raise PermissionError("the audit log is append-only")


class WebhookDelivery(models.Model):
    """One attempt to POST one event to a client's webhook: append-only, shown read-only in the admin."""

    class Outcome(models.TextChoices):
        DELIVERED = "delivered"  # a 2xx answer
        RETRYING = "retrying"  # failed; another attempt is scheduled
        GAVE_UP = "gave_up"  # failed on the last attempt (WEBHOOK_MAX_ATTEMPTS)
        SKIPPED = "skipped"  # nothing sent: no URL any more, client inactive, or a refused address

    client = models.ForeignKey(ApiClient, on_delete=models.PROTECT, related_name="webhook_deliveries")
    call = models.ForeignKey(Call, on_delete=models.PROTECT, null=True, blank=True, related_name="webhook_deliveries")
    event_id = models.UUIDField(db_index=True, help_text="The event's id, the same in every attempt (X-Triage-Event-Id)")
    event = models.CharField(max_length=30, help_text="The event type, e.g. call.triaged, call.done, webhook.ping")
    url = models.CharField(max_length=500, blank=True)
    attempt = models.PositiveSmallIntegerField()
    outcome = models.CharField(max_length=10, choices=Outcome.choices)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    duration_ms = models.FloatField(default=0)
    payload = models.JSONField(default=dict, blank=True, help_text="The event as sent: what a resend sends again")

    class Meta:
        ordering = ["-started_at", "-id"]
        indexes = [models.Index(fields=["client", "started_at"])]
        verbose_name_plural = "webhook deliveries"

    def __str__(self) -> str:
        return f"{self.event} #{self.attempt} to {self.client} ({self.outcome})"
