"""GET /api/v1/calls/<id>/stream — a call's guidance as Server-Sent Events (docs/call-systems.md).

The request is checked like GET calls/<id>/ (Bearer token or dashboard session, a client sees only its own
calls; errors are the API's JSON), in DRF's sync view; what it returns is a ``StreamingHttpResponse`` over an
*async* iterator, which daphne (ASGI) serves from the event loop: a waiting stream costs a Redis connection
blocked in XREAD, not a thread. Under a WSGI server Django would have to buffer the whole async iterator
before sending anything, and a sync worker would be held for the whole call (gunicorn kills a silent one after
its timeout): the intake server (gunicorn) therefore refuses a stream at once with 421 and says where to go.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import timedelta
from urllib.parse import urlencode

from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django.http import StreamingHttpResponse
from django.urls import reverse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.authentication import SessionAuthentication
from rest_framework.exceptions import APIException, ValidationError
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from triage.models import ApiClient
from triage.selectors.guidance_events import (
    STREAM_ID,
    GuidanceEvent,
    call_guidance_events,
    release_database_connection,
)

from .authentication import (
    STREAM_ACCESS_PARAM,
    ApiClientTokenAuthentication,
    SignedStreamUrlAuthentication,
    stream_access_sign,
)
from .calls import CALL_ID, READ, ApiView, error_responses

EVENT_STREAM = "text/event-stream"
RETRY_MS = 2000  # how long an EventSource waits before it reconnects
LAST_EVENT_ID = OpenApiParameter(
    "Last-Event-ID", str, OpenApiParameter.HEADER, required=False,
    description="Resume: only events after this id are sent (an EventSource sends it when it reconnects)",
)
STREAM_DESCRIPTION = """Server-Sent Events, each with `event:`, `id:` (the replay log's entry id) and a JSON `data:` line:

* `replay` `{"text", "index", "done", "off_protocol"}` — the guidance so far (first event, not sent on resume)
* `token` `{"index", "text"}` — one generated token
* `guidance` `{"text", "off_protocol": true}` — the guard replaced the text with the protocol's own
* `restart` `{}` — the guidance is generated again (protocol switch): drop what was shown
* `done` `{"status"}` — `done`, `failed` or `cancelled`; the last event, then the server closes the stream

Lines starting with `:` are keep-alive comments."""


def sse_format(event: GuidanceEvent | None) -> str:
    """One event in the text/event-stream format; ``None`` is a keep-alive comment."""
    if event is None:
        return ": keep-alive\n\n"
    lines = [f"event: {event.event}"]
    if event.id is not None:
        lines.append(f"id: {event.id}")
    lines.append("data: " + json.dumps(event.data, ensure_ascii=False, separators=(",", ":")))
    return "\n".join(lines) + "\n\n"


async def _event_stream(call_id: int, after_id: str | None) -> AsyncIterator[str]:
    yield f"retry: {RETRY_MS}\n\n"
    async for event in call_guidance_events(call_id=call_id, after_id=after_id):
        yield sse_format(event)


class StreamNeedsAsgi(APIException):
    """421 Misdirected Request: this server (WSGI, the intake) cannot stream; the web process (daphne) can."""

    status_code = 421
    default_code = "stream_needs_asgi"
    default_detail = ("The guidance stream is served by the web process (daphne, ASGI), not by the intake server "
                      "(WSGI): open it on the web address, where the board is (docs/call-systems.md).")


class CallStreamApi(ApiView):
    """GET /api/v1/calls/<id>/stream — the guidance so far, then each new token, then ``done``."""

    authentication_classes = [SignedStreamUrlAuthentication, ApiClientTokenAuthentication, SessionAuthentication]
    access = {"GET": READ}

    def perform_content_negotiation(self, request: Request, force: bool = False) -> tuple[JSONRenderer, str]:
        # An EventSource sends "Accept: text/event-stream"; the stream itself is not rendered by DRF, and
        # a refusal (401, 404, 429) is the API's JSON error like on every other endpoint.
        return JSONRenderer(), JSONRenderer.media_type

    @extend_schema(
        operation_id="calls_stream",
        parameters=[CALL_ID, LAST_EVENT_ID],  # ?access= is the signedStreamUrl security scheme
        responses={
            (200, EVENT_STREAM): OpenApiResponse(OpenApiTypes.STR, description=STREAM_DESCRIPTION),
            **error_responses(421),
        },
    )
    def get(self, request: Request, call_id: str) -> StreamingHttpResponse:
        """Stream the call's guidance as Server-Sent Events; resume with `Last-Event-ID`."""
        call = self.get_call(call_id)
        after_id = request.headers.get("Last-Event-ID", "").strip() or None
        if after_id is not None and not STREAM_ID.fullmatch(after_id):
            raise ValidationError({"Last-Event-ID": ["An event id from this stream, e.g. 1712345678901-0."]})
        if not isinstance(request._request, ASGIRequest):
            raise StreamNeedsAsgi()
        release_database_connection()  # the stream may last minutes: it holds no connection of the pool
        response = StreamingHttpResponse(_event_stream(call.pk, after_id), content_type=EVENT_STREAM)
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"  # nginx: pass each event on at once
        if STREAM_ACCESS_PARAM in request.query_params:
            # A browser CAD on its own origin: the signed URL is the credential (no cookie is sent or needed)
            response["Access-Control-Allow-Origin"] = "*"
        return response


class CallStreamUrlApi(ApiView):
    """GET /api/v1/calls/<id>/stream-url — a signed, short-lived address of the call's stream for a browser:
    ``EventSource`` cannot send ``Authorization``."""

    access = {"GET": READ}

    class OutputSerializer(serializers.Serializer):
        url = serializers.URLField(help_text="The stream's absolute URL with its signed `access`; open it as is")
        expires_at = serializers.DateTimeField(help_text="Open (or reopen) it before this; then ask again")

    @extend_schema(operation_id="calls_stream_url", parameters=[CALL_ID],
                   responses={200: OutputSerializer, **error_responses()})
    def get(self, request: Request, call_id: str) -> Response:
        """A signed URL of the call's guidance stream, valid for TRIAGE_STREAM_URL_TTL_S."""
        call = self.get_call(call_id)
        client = request.auth if isinstance(request.auth, ApiClient) else None  # else a dashboard user
        access = stream_access_sign(call_id=call.pk, client=client,
                                    user_id=None if client is not None else request.user.pk)
        url = request.build_absolute_uri(reverse("api-call-stream", args=[call.pk]) + "?" +
                                         urlencode({STREAM_ACCESS_PARAM: access}))
        ttl = timedelta(seconds=settings.TRIAGE["STREAM_URL_TTL_S"])
        return Response(CallStreamUrlApi.OutputSerializer({"url": url, "expires_at": timezone.now() + ttl}).data)
