"""The webhook events as the OpenAPI document declares them (OpenAPI 3.1 ``webhooks``): what a call system's
receiver gets, one entry per event type of ``triage.services.webhooks.WebhookEvent``."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, OpenApiWebhook, extend_schema
from rest_framework import serializers

from triage.models import CallStatus, Lifecycle
from triage.services.webhooks import WebhookEvent

from .call_output import DispatchPriorityOutputSerializer

EVENT_FIELDS = {
    WebhookEvent.TRIAGED: "`esi` and `tier` are set; `GET url` has the full assessment",
    WebhookEvent.LEVEL_CHANGED: "`from_esi`, `change` (override, confirmation, or retriage: an update's narrative read more urgent; `by` is then empty), `by`, `reason`",
    WebhookEvent.PROTOCOL_SWITCHED: "`protocol`, `from_protocol`, `by` (a dispatcher, or retriage): the guidance is generated again",
    WebhookEvent.DONE: "`done_at`, `guidance`, `guidance_protocol`, `off_protocol`",
    WebhookEvent.FAILED: "`failed_at`, `failure_reason`",
    WebhookEvent.CANCELLED: "`cancelled_at`",
    WebhookEvent.ACKNOWLEDGED: "`acknowledged_at`, `by`",
    WebhookEvent.CLOSED: "`closed_at`, `outcome`, `by`",
}


class WebhookCallSerializer(serializers.Serializer):
    """The call as it was in the transaction that caused the event; the event's own fields beside."""

    id = serializers.IntegerField()
    external_id = serializers.CharField()
    lifecycle = serializers.ChoiceField(choices=Lifecycle.choices)
    status = serializers.ChoiceField(choices=CallStatus.choices, help_text="The engine's state (diagnostic)")
    esi = serializers.IntegerField(allow_null=True)
    tier = serializers.CharField(allow_null=True)
    received_at = serializers.DateTimeField()
    triaged_at = serializers.DateTimeField(allow_null=True)
    url = serializers.CharField(help_text="The call in the API (a path)")
    stream_url = serializers.CharField(help_text="Its guidance stream (a path)")
    dispatch_priority = DispatchPriorityOutputSerializer(allow_null=True)


class WebhookEventSerializer(serializers.Serializer):
    id = serializers.UUIDField(help_text="The event's id, also `webhook-id`: the same across attempts")
    type = serializers.ChoiceField(choices=[(e.value, e.value) for e in WebhookEvent])
    created_at = serializers.DateTimeField()
    call = WebhookCallSerializer()


WEBHOOKS = [
    OpenApiWebhook(name=event.value, decorator=extend_schema(
        summary=f"{event.value}: {EVENT_FIELDS[event]}",
        description="Signed as Standard Webhooks specifies (`webhook-id`, `webhook-timestamp`, `webhook-signature`: "
                    "docs/call-systems.md). Answer 2xx; anything else is tried again with backoff.",
        request={"application/json": WebhookEventSerializer},
        responses={200: OpenApiResponse(description="Received")},
    ))
    for event in WebhookEvent
]
