"""``Authorization: Bearer <token>`` for call-handling systems (one token per ApiClient), and the signed stream
URL a browser's ``EventSource`` opens instead (it cannot send ``Authorization``)."""

from __future__ import annotations

import time

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core import signing
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.plumbing import build_bearer_security_scheme_object
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from triage.models import ApiClient
from triage.selectors.clients import api_client_active, api_client_for_token

# token -> (expires at, client). Saves a query per intake request; a rotated or deactivated token keeps
# working in a process for at most API_TOKEN_CACHE_S (0 disables the cache). Invalid tokens are not cached.
_token_cache: dict[str, tuple[float, ApiClient]] = {}
_TOKEN_CACHE_MAX = 1024


def _cached_client(token: str) -> ApiClient | None:
    ttl_s = settings.TRIAGE.get("API_TOKEN_CACHE_S", 0)
    now = time.monotonic()
    hit = _token_cache.get(token) if ttl_s > 0 else None
    if hit is not None and hit[0] > now:
        return hit[1]
    client = api_client_for_token(token)
    if client is not None and ttl_s > 0:
        if len(_token_cache) >= _TOKEN_CACHE_MAX:
            _token_cache.clear()
        _token_cache[token] = (now + ttl_s, client)
    return client


class ApiClientTokenAuthentication(BaseAuthentication):
    """Sets ``request.user`` and ``request.auth`` to the ApiClient. Listed first, so that a request without
    credentials gets 401 with ``WWW-Authenticate: Bearer``, not 403."""

    keyword = b"bearer"

    def authenticate(self, request: Request) -> tuple[ApiClient, ApiClient] | None:
        header = get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword:
            return None
        if len(header) != 2:
            raise AuthenticationFailed("Invalid Authorization header: expected 'Bearer <token>'.")
        try:
            token = header[1].decode("ascii")
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid token.") from None
        client = _cached_client(token)
        if client is None:
            raise AuthenticationFailed("Invalid or inactive token.")
        return client, client

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="triage"'


class ApiClientTokenScheme(OpenApiAuthenticationExtension):
    """Documents the Bearer scheme in the OpenAPI schema."""

    target_class = ApiClientTokenAuthentication
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: object) -> dict[str, str]:
        return build_bearer_security_scheme_object(header_name="Authorization", token_prefix="Bearer")


STREAM_URL_SALT = "triage.api.stream-url"
STREAM_ACCESS_PARAM = "access"


def stream_access_sign(*, call_id: int, client: ApiClient | None, user_id: int | None) -> str:
    """The ``access`` value of a call's signed stream URL: who asked (an API client or a dashboard user) and for
    which call, signed with the secret key and timestamped (valid for TRIAGE_STREAM_URL_TTL_S)."""
    return signing.dumps({"call": call_id, "client": client.pk if client else None, "user": user_id},
                         salt=STREAM_URL_SALT)


class SignedStreamUrlAuthentication(BaseAuthentication):
    """``?access=`` from ``GET calls/<id>/stream-url``: the holder reads that one call's stream as whoever asked
    for the URL, while it is valid and they still are (an inactive client or user is refused)."""

    def authenticate(self, request: Request) -> tuple[object, ApiClient | None] | None:
        value = request.query_params.get(STREAM_ACCESS_PARAM)
        if value is None:
            return None
        try:
            granted = signing.loads(value, salt=STREAM_URL_SALT, max_age=settings.TRIAGE["STREAM_URL_TTL_S"])
        except signing.SignatureExpired:
            raise AuthenticationFailed("The stream URL has expired: ask for a new one (GET calls/<id>/stream-url).") from None
        except signing.BadSignature:
            raise AuthenticationFailed("Invalid stream URL.") from None
        if str(granted.get("call")) != str(request.parser_context["kwargs"].get("call_id")):
            raise AuthenticationFailed("This stream URL is for another call.")
        if granted.get("client") is not None:
            client = api_client_active(granted["client"])
            if client is None:
                raise AuthenticationFailed("Invalid or inactive token.")
            return client, client
        user = get_user_model().objects.filter(pk=granted.get("user"), is_active=True).first()
        if user is None:
            raise AuthenticationFailed("The user this stream URL was made for is inactive.")
        return user, None

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="triage"'


class SignedStreamUrlScheme(OpenApiAuthenticationExtension):
    """Documents the signed stream URL's ``access`` query parameter."""

    target_class = SignedStreamUrlAuthentication
    name = "signedStreamUrl"

    def get_security_definition(self, auto_schema: object) -> dict[str, str]:
        return {"type": "apiKey", "in": "query", "name": STREAM_ACCESS_PARAM,
                "description": "From GET /api/v1/calls/{call_id}/stream-url; for an EventSource"}
