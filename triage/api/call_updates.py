"""/api/v1/calls/<id>/updates/: what the call system learned after posting a call (narrative, a location
rebid, a callback number). POST appends one update (idempotent per ``update_id``), GET lists them."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from triage.models import ApiClient
from triage.roles import is_dispatcher
from triage.selectors.calls import call_updates
from triage.services.call_updates import call_update_append

from .calls import CALL_ID, READ, ApiView, error_responses, received_at_not_future
from .fields import CleanCharField, StrictFloatField, StrictSerializer
from .permissions import Access

LOCATION_UNCERTAINTY_MAX_M = 100_000
UPDATES_LISTED_MAX = 1000


class CallUpdateOutputSerializer(serializers.Serializer):
    update_id = serializers.CharField()
    received_at = serializers.DateTimeField()
    created_at = serializers.DateTimeField()
    narrative = serializers.CharField(allow_blank=True)
    location_address = serializers.CharField(allow_blank=True)
    location_lat = serializers.FloatField(allow_null=True)
    location_lon = serializers.FloatField(allow_null=True)
    location_uncertainty_m = serializers.FloatField(allow_null=True)
    callback_number = serializers.CharField(allow_blank=True)
    narrative_revision = serializers.IntegerField(
        allow_null=True, help_text="The call's narrative revision this update made (null: it added no narrative)")


class CallUpdatesApi(ApiView):
    """POST /api/v1/calls/<id>/updates/ — 201 with the stored update, 200 with it on a retry (same update_id
    and body), 409 when the update_id was used for another body or the call is cancelled or closed.
    GET — the call's updates, oldest first."""

    access = {"POST": Access(client_scope=ApiClient.SCOPE_WRITE, user_check=is_dispatcher), "GET": READ}

    @extend_schema_serializer(component_name="CallUpdateAppendInput")
    class InputSerializer(StrictSerializer):
        update_id = CleanCharField(max_length=100, single_line=True,
                                   help_text="The call system's id of this update: a retry sends the same one")
        received_at = serializers.DateTimeField(help_text="When the call system learned it")
        narrative = CleanCharField(max_length=settings.TRIAGE["TRANSCRIPT_MAX_CHARS"], required=False,
                                   allow_blank=True, help_text="New lines of what the caller says: the call is "
                                                               "triaged again (its level raised at once, never lowered)")
        location_address = CleanCharField(max_length=300, required=False, allow_blank=True)
        location_lat = StrictFloatField(min_value=-90, max_value=90, required=False, allow_null=True)
        location_lon = StrictFloatField(min_value=-180, max_value=180, required=False, allow_null=True)
        location_uncertainty_m = StrictFloatField(min_value=0, max_value=LOCATION_UNCERTAINTY_MAX_M, required=False,
                                                  allow_null=True, help_text="Radius of the location's uncertainty")
        callback_number = CleanCharField(max_length=40, required=False, allow_blank=True, single_line=True)

        def validate_received_at(self, value: Any) -> Any:
            return received_at_not_future(value)

        def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
            given = {name for name, value in attrs.items() if value not in ("", None)} - {"update_id", "received_at"}
            if not given:
                message = "Give narrative, a location or a callback number."
                raise serializers.ValidationError({"narrative": [message], "location_lat": [message],
                                                   "callback_number": [message]})
            if (attrs.get("location_lat") is None) != (attrs.get("location_lon") is None):
                missing = "location_lon" if attrs.get("location_lon") is None else "location_lat"
                raise serializers.ValidationError({missing: ["location_lat and location_lon come together."]})
            return attrs

    @extend_schema(
        operation_id="calls_updates_create", request=InputSerializer, parameters=[CALL_ID],
        responses={201: CallUpdateOutputSerializer, 200: CallUpdateOutputSerializer, **error_responses(409, 413, 415)},
    )
    def post(self, request: Request, call_id: str) -> Response:
        """Append an update to a call (the posting client with calls:write, or a dispatcher)."""
        serializer = CallUpdatesApi.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        update, created = call_update_append(call=self.get_call(call_id), actor=request.user,
                                             **serializer.validated_data)
        return Response(CallUpdateOutputSerializer(update).data,
                        status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    @extend_schema(operation_id="calls_updates_list", parameters=[CALL_ID],
                   responses={200: CallUpdateOutputSerializer(many=True), **error_responses()})
    def get(self, request: Request, call_id: str) -> Response:
        """The call's updates, oldest first (at most the first 1,000)."""
        updates = call_updates(call=self.get_call(call_id))[:UPDATES_LISTED_MAX]
        return Response(CallUpdateOutputSerializer(updates, many=True).data)
