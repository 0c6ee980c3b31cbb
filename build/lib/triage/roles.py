"""The people who use the dashboard, as Django groups (created by migration 0003).

- dispatcher: watches the queue, overrides an ESI level (with a reason), cancels a call.
- supervisor: everything a dispatcher may do, plus the supervisor views.
- admin: tiers, scheduler settings, API clients (superusers count as admins).

Roles nest: a supervisor is also a dispatcher; an admin is not a dispatcher unless also in a dispatching group.
"""

from __future__ import annotations

from typing import Any

DISPATCHER = "dispatcher"
SUPERVISOR = "supervisor"
ADMIN = "admin"
ROLES = (DISPATCHER, SUPERVISOR, ADMIN)


def user_roles(user: Any) -> frozenset[str]:
    """The role names of a user; cached on the user object for the life of the request."""
    if user is None or not getattr(user, "is_authenticated", False) or not hasattr(user, "groups"):
        return frozenset()
    cached = getattr(user, "_triage_roles", None)
    if cached is None:
        cached = frozenset(user.groups.filter(name__in=ROLES).values_list("name", flat=True))
        user._triage_roles = cached
    return cached


def is_dispatcher(user: Any) -> bool:
    return bool(user_roles(user) & {DISPATCHER, SUPERVISOR})


def is_supervisor(user: Any) -> bool:
    return SUPERVISOR in user_roles(user)


def is_admin(user: Any) -> bool:
    return bool(getattr(user, "is_superuser", False)) or ADMIN in user_roles(user)


def has_any_role(user: Any) -> bool:
    return bool(user_roles(user)) or is_admin(user)
