"""The one domain error type; the API's exception handler turns it into the one error shape."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


class DomainError(Exception):
    """A business rule said no. ``fields`` maps a field name to its messages (the API names the field)."""

    status_code = 400
    code = "invalid"

    def __init__(self, message: str, *, fields: Mapping[str, Sequence[str]] | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.fields = {k: list(v) for k, v in (fields or {}).items()}
        if code is not None:
            self.code = code


class InvalidTransition(DomainError):
    status_code = 409
    code = "invalid_transition"


class Conflict(DomainError):
    status_code = 409
    code = "conflict"


class Unavailable(DomainError):
    """A service the change needs (Redis) is down; nothing was changed, the client may retry."""

    status_code = 503
    code = "unavailable"


class NotAllowed(DomainError):
    status_code = 403
    code = "permission_denied"


def field_error(field: str, message: str, *, cls: type[DomainError] = DomainError, code: str | None = None) -> DomainError:
    return cls(message, fields={field: [message]}, code=code)
