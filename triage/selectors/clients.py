"""Finding the API client behind a bearer token."""

from __future__ import annotations

import hmac

from django.utils import timezone

from triage.api_tokens import token_hash, token_split
from triage.models import ApiClient


def api_client_for_token(token: str) -> ApiClient | None:
    """The active client whose token this is: its current one, or the one before a rotation while its overlap
    lasts; None for an unknown, malformed, expired or inactive token."""
    parts = token_split(token)
    if parts is None:
        return None
    client = ApiClient.objects.filter(token_prefix=parts[0], is_active=True).first()
    if client is not None:
        return client if hmac.compare_digest(client.token_hash, token_hash(token)) else None
    client = ApiClient.objects.filter(token_previous_prefix=parts[0], is_active=True,
                                      token_previous_until__gt=timezone.now()).first()
    if client is None or not hmac.compare_digest(client.token_previous_hash, token_hash(token)):
        return None
    return client


def api_client_active(pk: int) -> ApiClient | None:
    return ApiClient.objects.filter(pk=pk, is_active=True).first()
