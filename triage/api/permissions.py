"""Who may call which action: an API client by scope, a user by role (docs/architecture.md §1)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from triage.models import ApiClient


@dataclass(frozen=True)
class Access:
    """``client_scope``: the scope an API client needs (None: clients may not); ``user_check``: the role test
    a session user must pass (None: users may not); ``user_needs``: the role named in the 403 message."""

    client_scope: str | None = None
    user_check: Callable[[Any], bool] | None = None
    user_needs: str = "a dispatcher role"


class ActionAccess(BasePermission):
    """Reads ``view.access[request.method]``."""

    message = "You may not do this."

    def has_permission(self, request: Request, view: Any) -> bool:
        access: Access | None = getattr(view, "access", {}).get(request.method)
        if access is None:
            return False
        if isinstance(request.auth, ApiClient):
            return self._client_allowed(request.auth, access)
        if access.user_check is None:
            self.message = "This action is for API clients (Bearer token)."
            return False
        self.message = f"This action needs {access.user_needs}."
        return bool(request.user and request.user.is_authenticated and access.user_check(request.user))

    def _client_allowed(self, client: ApiClient, access: Access) -> bool:
        if access.client_scope is None:
            self.message = "This action is for dispatcher users, not API clients."
            return False
        self.message = f"This token lacks the {access.client_scope} scope."
        return client.has_scope(access.client_scope)
