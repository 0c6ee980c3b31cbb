"""What every admin page of the dispatch app shares: access by role, and how a refused change is reported."""

from __future__ import annotations

from django.contrib import admin, messages
from django.http import HttpRequest

from triage.roles import is_admin, is_supervisor
from triage.services.errors import DomainError


def _may_configure(request: HttpRequest) -> bool:
    return is_supervisor(request.user) or is_admin(request.user)


class RoleAdmin(admin.ModelAdmin):
    """Model permissions *or* the role decide: groups need no per-model permission rows."""

    def _role_ok(self, request: HttpRequest) -> bool:
        return _may_configure(request)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return super().has_module_permission(request) or (request.user.is_staff and self._role_ok(request))

    def has_view_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return super().has_view_permission(request, obj) or self._role_ok(request)

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return super().has_change_permission(request, obj) or self._role_ok(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return super().has_add_permission(request) or self._role_ok(request)

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return super().has_delete_permission(request, obj) or self._role_ok(request)


def _report(request: HttpRequest, exc: DomainError) -> None:
    details = "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.fields.items())
    messages.error(request, f"{exc.message}{' — ' + details if details else ''}")


class ReadOnlyRoleAdmin(RoleAdmin):
    """A record written by the system alone: nobody adds, edits or deletes it here."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
