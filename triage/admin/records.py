"""The append-only records, read-only: the audit log and the updates call systems sent."""

from __future__ import annotations

from django.contrib import admin

from triage.models import AuditEvent, CallUpdate

from .base import ReadOnlyRoleAdmin

# --- the audit log (read-only) -----------------------------------------------------------------------


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyRoleAdmin):
    list_display = ("created_at", "action", "actor", "call", "from_status", "to_status")
    list_filter = ("action", "to_status", ("created_at", admin.DateFieldListFilter))
    search_fields = ("actor", "action", "call__external_id")
    date_hierarchy = "created_at"
    list_select_related = ("call",)
    readonly_fields = ("created_at", "action", "actor", "actor_user", "call", "from_status", "to_status", "data")


# --- call updates (read-only: what the call system sent, as sent) -----------------------------------


@admin.register(CallUpdate)
class CallUpdateAdmin(ReadOnlyRoleAdmin):
    list_display = ("created_at", "call", "update_id", "narrative_revision", "callback_number")
    search_fields = ("update_id", "call__external_id", "narrative")
    date_hierarchy = "created_at"
    list_select_related = ("call",)
    readonly_fields = ("call", "update_id", "received_at", "created_at", "narrative", "location_address",
                       "location_lat", "location_lon", "location_uncertainty_m", "callback_number",
                       "narrative_revision")
