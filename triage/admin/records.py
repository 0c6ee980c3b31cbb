"""The audit log, read-only."""

from __future__ import annotations

from django.contrib import admin

from triage.models import (
    AuditEvent,
)

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
