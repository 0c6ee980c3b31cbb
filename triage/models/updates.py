"""Updates to a call: what the call system learned after posting it (EIDO-style incident updates)."""

from __future__ import annotations

from django.db import models

from .calls import Call


class CallUpdate(models.Model):
    """One update from the call system: more narrative, a better location, a callback number, or several.
    Idempotent per (call, update_id); applied to the call in the transaction that stores it, and kept as
    posted so that a retry can be told from a different update under a reused id."""

    call = models.ForeignKey(Call, on_delete=models.PROTECT, related_name="updates")
    update_id = models.CharField(max_length=100, help_text="The call system's id of this update")
    received_at = models.DateTimeField(help_text="When the call system learned it")
    created_at = models.DateTimeField(auto_now_add=True)
    narrative = models.TextField(blank=True, help_text="New lines of what the caller says, appended to the transcript")
    location_address = models.CharField(max_length=300, blank=True)
    location_lat = models.FloatField(null=True, blank=True)
    location_lon = models.FloatField(null=True, blank=True)
    location_uncertainty_m = models.FloatField(null=True, blank=True)
    callback_number = models.CharField(max_length=40, blank=True)
    narrative_revision = models.PositiveIntegerField(
        null=True, blank=True, help_text="The call's narrative revision this update made (none without narrative)")

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [models.UniqueConstraint(fields=["call", "update_id"], name="one_update_per_update_id")]

    def __str__(self) -> str:
        return f"Update {self.update_id} of call {self.call_id}"
