"""POST /api/v1/webhooks/ping/ and /resend/: a call system checks its receiver (a signed test event) or has an
event sent again (one given up, or one its receiver lost), without asking an administrator."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from triage.models import ApiClient
from triage.services.webhooks import webhook_ping, webhook_resend

from .calls import ApiView, error_responses
from .fields import StrictSerializer
from .permissions import Access

CLIENTS_ONLY = Access(client_scope=ApiClient.SCOPE_READ)


class EventAcceptedSerializer(serializers.Serializer):
    event_id = serializers.UUIDField(help_text="The event's id (`webhook-id`): watch for it at the receiver")


class WebhookPingApi(ApiView):
    access = {"POST": CLIENTS_ONLY}

    @extend_schema(operation_id="webhooks_ping", request=None,
                   responses={202: EventAcceptedSerializer, **error_responses(409)})
    def post(self, request: Request) -> Response:
        """Send this client's webhook a signed `webhook.ping` event (409: the client has no webhook URL)."""
        event_id = webhook_ping(client=request.auth, actor=request.auth)
        return Response(EventAcceptedSerializer({"event_id": event_id}).data, status=status.HTTP_202_ACCEPTED)


class WebhookResendApi(ApiView):
    access = {"POST": CLIENTS_ONLY}

    class InputSerializer(StrictSerializer):
        event_id = serializers.UUIDField(help_text="The id of an event sent to this client")

    @extend_schema(operation_id="webhooks_resend", request=InputSerializer,
                   responses={202: EventAcceptedSerializer, **error_responses(409, 413, 415)})
    def post(self, request: Request) -> Response:
        """Send one of this client's events again, as first sent and under the same id."""
        serializer = WebhookResendApi.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        event_id = webhook_resend(client=request.auth, event_id=str(serializer.validated_data["event_id"]),
                                  actor=request.auth)
        return Response(EventAcceptedSerializer({"event_id": event_id}).data, status=status.HTTP_202_ACCEPTED)
