"""API clients: a call-handling system's identity. The token is shown once; only its SHA-256 is stored.

Token format ``trg_<prefix>_<secret>``: the 8-hex-digit prefix finds the row (unique index), the secret is
32 random bytes, so a plain SHA-256 (no slow KDF) is enough — there is nothing to brute-force.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from triage.api_tokens import TOKEN_PREFIX, token_hash
from triage.models import ApiClient, AuditAction

from .audit import Actor, SystemActor, audit_record
from .errors import Conflict, field_error
from .webhooks import webhook_secret_new, webhook_url_clean

THROTTLE_PERIODS = ("s", "sec", "m", "min", "h", "hour", "d", "day")


@dataclass(frozen=True)
class IssuedToken:
    client: ApiClient
    token: str  # shown to the operator once, never stored

    def __iter__(self) -> Iterator[Any]:  # `client, token = api_client_create(...)`
        return iter((self.client, self.token))


def _new_token() -> tuple[str, str]:
    prefix = secrets.token_hex(4)
    return prefix, f"{TOKEN_PREFIX}_{prefix}_{secrets.token_urlsafe(32)}"


def _clean_scopes(scopes: Iterable[str]) -> list[str]:
    scopes = list(dict.fromkeys(scopes))
    unknown = [s for s in scopes if s not in ApiClient.ALL_SCOPES]
    if unknown or not scopes:
        raise field_error("scopes", f"choose from {', '.join(ApiClient.ALL_SCOPES)}")
    return scopes


def _clean_rate(rate: str) -> str:
    if not rate:
        return ""
    count, _, period = rate.partition("/")
    if not count.isdigit() or int(count) < 1 or period not in THROTTLE_PERIODS:
        raise field_error("throttle_rate", 'use "<requests>/<s|min|hour|day>", e.g. "600/min"')
    return rate


def _issue(client: ApiClient) -> str:
    """Give ``client`` a fresh token (retrying the rare prefix collision) and save it."""
    for _ in range(5):
        prefix, token = _new_token()
        client.token_prefix, client.token_hash = prefix, token_hash(token)
        try:
            with transaction.atomic():
                client.save()
            return token
        except IntegrityError:
            if ApiClient.objects.filter(name=client.name).exclude(pk=client.pk).exists():
                raise Conflict(f"an API client named {client.name!r} exists", fields={"name": ["already taken"]}) from None
    raise RuntimeError("could not draw a unique token prefix")


SYSTEM_CLI = SystemActor.CLI



def api_client_create(
    *, name: str, actor: Actor = SYSTEM_CLI, scopes: Iterable[str] = ApiClient.ALL_SCOPES, throttle_rate: str = "",
    webhook_url: str = "",
) -> IssuedToken:
    name = name.strip()
    if not name or len(name) > 100:
        raise field_error("name", "a name of 1 to 100 characters is required")
    client = ApiClient(
        name=name, scopes=_clean_scopes(scopes), throttle_rate=_clean_rate(throttle_rate),
        webhook_url=webhook_url_clean(webhook_url),
        webhook_secret=webhook_secret_new(),  # drawn now, so a webhook set later is signed from the start
    )
    with transaction.atomic():
        token = _issue(client)
        audit_record(action=AuditAction.API_CLIENT_CREATED, actor=actor,
                     data={"client": name, "scopes": client.scopes, "webhook_url": client.webhook_url})
    return IssuedToken(client=client, token=token)


def api_client_rotate(*, client: ApiClient, actor: Actor = SYSTEM_CLI, overlap_s: float | None = None) -> IssuedToken:
    """A new token for ``client``. The old one keeps working for ``overlap_s`` (TRIAGE_API_TOKEN_OVERLAP_S, 24 h;
    0: it stops at once), so a call system running around the clock can switch without a gap; a token older
    than that stops at once."""
    overlap_s = settings.TRIAGE["API_TOKEN_OVERLAP_S"] if overlap_s is None else overlap_s
    with transaction.atomic():
        now = timezone.now()
        client.rotated_at = now
        client.token_previous_prefix, client.token_previous_hash = client.token_prefix, client.token_hash
        client.token_previous_until = now + timedelta(seconds=overlap_s) if overlap_s > 0 else None
        token = _issue(client)
        audit_record(action=AuditAction.API_CLIENT_ROTATED, actor=actor,
                     data={"client": client.name, "previous_token_until":
                           client.token_previous_until.isoformat() if client.token_previous_until else None})
    return IssuedToken(client=client, token=token)


def api_client_deactivate(*, client: ApiClient, actor: Actor = SYSTEM_CLI) -> ApiClient:
    with transaction.atomic():
        client.is_active = False
        client.save(update_fields=["is_active"])
        audit_record(action=AuditAction.API_CLIENT_DEACTIVATED, actor=actor, data={"client": client.name})
    return client
