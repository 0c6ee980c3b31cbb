"""The call endpoints under /api/v1/. One class per action, each with its own input and output serializers;
a view validates, calls one service or selector, and serializes the result.

Authentication: call-handling systems use ``Authorization: Bearer <token>`` (scopes ``calls:write`` and
``calls:read``) and see only their own calls; dashboard users use their Django session (CSRF enforced for
unsafe methods) and need a role: any role to read, the dispatcher (or supervisor) role to override or cancel.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.http import Http404
from django.urls import reverse
from django.utils import timezone
from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_serializer,
)
from rest_framework import serializers, status
from rest_framework.authentication import SessionAuthentication
from rest_framework.pagination import CursorPagination
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from triage.models import ESI_LEVELS, ApiClient, Call, CallStatus, Lifecycle
from triage.roles import has_any_role, is_dispatcher
from triage.selectors.calls import call_get, call_list
from triage.services.calls import call_cancel, call_create
from triage.services.overrides import OVERRIDE_REASON_MAX_CHARS, call_override_level
from triage.services.protocols import call_switch_protocol
from triage.services.recovery import call_retry

from .authentication import ApiClientTokenAuthentication
from .call_output import CallOutputSerializer
from .exception_handler import ErrorSerializer
from .fields import CleanCharField, StrictFloatField, StrictIntegerField, StrictSerializer
from .parsers import LimitedJSONParser
from .permissions import Access, ActionAccess
from .throttles import ApiClientRateThrottle

RECEIVED_AT_MAX_SKEW = timedelta(minutes=5)
MAX_ID = 2**63 - 1  # bigint
CALL_ID = OpenApiParameter("call_id", int, OpenApiParameter.PATH, description="The call's id")
READ = Access(client_scope=ApiClient.SCOPE_READ, user_check=has_any_role, user_needs="a dashboard role")


def error_responses(*codes: int) -> dict[int, OpenApiResponse]:
    """The error answers an endpoint documents: the common ones and ``codes``."""
    return {code: OpenApiResponse(ErrorSerializer) for code in (400, 401, 403, 404, 429, *codes)}


def received_at_not_future(value: Any) -> Any:
    """A call system's clock may run a little ahead of ours (RECEIVED_AT_MAX_SKEW), not more."""
    if value > timezone.now() + RECEIVED_AT_MAX_SKEW:
        raise serializers.ValidationError("Must not be in the future.")
    return value


def query_params_as_dict(request: Request, *, list_fields: tuple[str, ...]) -> dict[str, Any]:
    """Query parameters as plain data, so that ``?since=`` is an invalid date, not an omitted filter (DRF's
    form semantics), and a repeated scalar parameter is an error, not "the last one wins"."""
    data: dict[str, Any] = {}
    for name, values in request.query_params.lists():
        data[name] = values if name in list_fields or len(values) > 1 else values[0]
    return data


def _client(request: Request) -> ApiClient | None:
    return request.auth if isinstance(request.auth, ApiClient) else None


class ApiView(APIView):
    authentication_classes = [ApiClientTokenAuthentication, SessionAuthentication]
    permission_classes = [ActionAccess]
    throttle_classes = [ApiClientRateThrottle]
    parser_classes = [LimitedJSONParser]
    renderer_classes = [JSONRenderer]
    access: dict[str, Access] = {}

    def get_call(self, call_id: str) -> Call:
        call = None
        if call_id.isascii() and call_id.isdigit() and 0 < int(call_id) <= MAX_ID:
            call = call_get(call_id=int(call_id), client=_client(self.request))
        if call is None:
            raise Http404("No such call.")
        return call


class CallCreateApi(ApiView):
    """POST /api/v1/calls/ — 201 with the new call, 200 with the existing one on a retry (same external_id and
    body), 409 naming the fields when the external_id was used for another body."""

    access = {"POST": Access(client_scope=ApiClient.SCOPE_WRITE)}

    @extend_schema_serializer(component_name="CallCreateInput")
    class InputSerializer(StrictSerializer):
        external_id = CleanCharField(max_length=100, single_line=True)
        received_at = serializers.DateTimeField()
        transcript = CleanCharField(max_length=settings.TRIAGE["TRANSCRIPT_MAX_CHARS"])
        caller_name = CleanCharField(max_length=200, required=False, allow_blank=True, single_line=True)
        caller_phone = CleanCharField(max_length=40, required=False, allow_blank=True, single_line=True)
        caller_relation = CleanCharField(max_length=40, required=False, allow_blank=True, single_line=True)
        location_address = CleanCharField(max_length=300, required=False, allow_blank=True)
        location_lat = StrictFloatField(min_value=-90, max_value=90, required=False, allow_null=True)
        location_lon = StrictFloatField(min_value=-180, max_value=180, required=False, allow_null=True)
        location_uncertainty_m = StrictFloatField(
            min_value=0, max_value=100_000, required=False, allow_null=True,
            help_text="Radius of the location's uncertainty (a handset's): linked calls are matched within it")

        def validate_transcript(self, value: str) -> str:
            # max_length above documents the limit in the schema; this also honours a limit lowered at run time
            limit = settings.TRIAGE["TRANSCRIPT_MAX_CHARS"]
            if len(value) > limit:
                raise serializers.ValidationError(f"Ensure this field has no more than {limit} characters.")
            return value

        def validate_received_at(self, value: Any) -> Any:
            return received_at_not_future(value)

    @extend_schema_serializer(component_name="CallCreateOutput")
    class OutputSerializer(serializers.Serializer):
        id = serializers.IntegerField()
        external_id = serializers.CharField()
        status = serializers.ChoiceField(choices=CallStatus.choices)
        esi = serializers.IntegerField(source="level", allow_null=True)
        received_at = serializers.DateTimeField()
        created_at = serializers.DateTimeField()

    @extend_schema(
        operation_id="calls_create",
        request=InputSerializer,
        responses={201: OutputSerializer, 200: OutputSerializer, **error_responses(409, 413, 415)},
    )
    def post(self, request: Request) -> Response:
        """Accept a call: 201 with the new call, or 200 with the existing one on a retry (same external_id)."""
        serializer = CallCreateApi.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        call, created = call_create(client=request.auth, **serializer.validated_data)
        return Response(
            CallCreateApi.OutputSerializer(call).data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
            headers={"Location": reverse("api-call-detail", args=[call.pk])},
        )


class CallCursorPagination(CursorPagination):
    ordering = "-created_at"
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200


class CallListApi(ApiView):
    """GET /api/v1/calls/ — newest first, cursor-paginated; filters combine with AND."""

    access = {"GET": READ}

    @extend_schema_serializer(component_name="CallListFilter")
    class FilterSerializer(StrictSerializer):
        status = serializers.ListField(
            child=serializers.ChoiceField(choices=CallStatus.choices), required=False, max_length=len(CallStatus)
        )
        esi = serializers.ListField(
            child=serializers.ChoiceField(choices=ESI_LEVELS), required=False, max_length=len(ESI_LEVELS),
            help_text="Effective ESI level (override included)",
        )
        lifecycle = serializers.ListField(
            child=serializers.ChoiceField(choices=Lifecycle.choices), required=False, max_length=len(Lifecycle),
            help_text="The public lifecycle stage (stable; `status` is the engine's diagnostic state)")
        since = serializers.DateTimeField(required=False, help_text="Calls received at or after this time")
        updated_since = serializers.DateTimeField(
            required=False, help_text="Calls created or changed at or after this time: reconcile after missed events")
        incident = serializers.IntegerField(required=False, min_value=1, max_value=MAX_ID,
                                            help_text="The calls linked to this incident")
        cursor = serializers.CharField(required=False, max_length=500)
        page_size = serializers.IntegerField(required=False, min_value=1, max_value=200)

    @extend_schema_serializer(component_name="CallListOutput")
    class OutputSerializer(serializers.Serializer):
        next = serializers.URLField(allow_null=True)
        previous = serializers.URLField(allow_null=True)
        results = CallOutputSerializer(many=True)

    @extend_schema(operation_id="calls_list", parameters=[FilterSerializer], responses={200: OutputSerializer, **error_responses()})
    def get(self, request: Request) -> Response:
        """List calls, newest first, cursor-paginated; filters combine with AND."""
        filters = CallListApi.FilterSerializer(
            data=query_params_as_dict(request, list_fields=("status", "esi", "lifecycle")))
        filters.is_valid(raise_exception=True)
        data = filters.validated_data
        calls = call_list(
            client=_client(request), statuses=data.get("status"), levels=data.get("esi"), since=data.get("since"),
            lifecycles=data.get("lifecycle"), updated_since=data.get("updated_since"), incident=data.get("incident"),
        )
        paginator = CallCursorPagination()
        page = paginator.paginate_queryset(calls, request, view=self)
        return paginator.get_paginated_response(CallOutputSerializer(page, many=True).data)


class CallDetailApi(ApiView):
    """GET /api/v1/calls/<id>/ — a call with its assessment and status."""

    access = {"GET": READ}

    @extend_schema(operation_id="calls_retrieve", parameters=[CALL_ID], responses={200: CallOutputSerializer, **error_responses()})
    def get(self, request: Request, call_id: str) -> Response:
        """A call with its assessment and status."""
        return Response(CallOutputSerializer(self.get_call(call_id)).data)


class CallOverrideApi(ApiView):
    """PATCH /api/v1/calls/<id>/ — a dispatcher sets the ESI level (with a reason), switches the dispatch
    protocol (the guidance is generated again), or both."""

    access = {"PATCH": Access(user_check=is_dispatcher)}

    @extend_schema_serializer(component_name="CallUpdateInput")
    class InputSerializer(StrictSerializer):
        esi = StrictIntegerField(min_value=1, max_value=5, required=False,
                                 help_text="The new ESI level; `reason` is then required")
        reason = CleanCharField(max_length=OVERRIDE_REASON_MAX_CHARS, required=False,
                                help_text="Why the level is overridden (required with `esi`)")
        disputed_reason = CleanCharField(
            max_length=300, required=False, allow_blank=True,
            help_text="Which of the assessment's reasons the dispatcher disagrees with (one of assessment.reasons)",
        )
        protocol = CleanCharField(max_length=40, required=False,
                                  help_text="A protocol id of the library: the guidance is generated again under it")

        def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
            if "esi" not in attrs and "protocol" not in attrs:
                raise serializers.ValidationError({"esi": ["Give esi (with reason) or protocol."],
                                                   "protocol": ["Give esi (with reason) or protocol."]})
            if "esi" in attrs and not attrs.get("reason"):
                raise serializers.ValidationError({"reason": ["A reason is required to override the ESI level."]})
            return attrs

    @extend_schema(
        operation_id="calls_update", request=InputSerializer, parameters=[CALL_ID],
        responses={200: CallOutputSerializer, **error_responses(409, 413, 415, 503)},
    )
    def patch(self, request: Request, call_id: str) -> Response:
        """Override the ESI level and/or switch the protocol (dispatcher session + CSRF)."""
        serializer = CallOverrideApi.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        call = self.get_call(call_id)
        if "esi" in data:
            call_override_level(call=call, level=data["esi"], reason=data["reason"],
                                disputed_reason=data.get("disputed_reason", ""), user=request.user)
        if "protocol" in data:
            call_switch_protocol(call=call, protocol=data["protocol"], user=request.user)
        return Response(CallOutputSerializer(self.get_call(call_id)).data)


class CallUpdateInputScheme(OpenApiSerializerExtension):
    """States the override's rule in the schema: ``esi`` comes with ``reason``, or ``protocol`` is given (or
    both). A PATCH body's fields are all optional to drf-spectacular; without this, clients and schemathesis
    would take ``{"esi": 2}`` for a valid request that the server refuses."""

    target_class = CallOverrideApi.InputSerializer

    def map_serializer(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        schema["anyOf"] = [{"required": ["esi", "reason"]}, {"required": ["protocol"]}]
        return schema


class CallCancelApi(ApiView):
    """POST /api/v1/calls/<id>/cancel/ — the posting client (calls:write) or a dispatcher cancels a call."""

    access = {"POST": Access(client_scope=ApiClient.SCOPE_WRITE, user_check=is_dispatcher)}

    @extend_schema_serializer(component_name="CallCancelInput")
    class InputSerializer(StrictSerializer):
        reason = CleanCharField(max_length=OVERRIDE_REASON_MAX_CHARS, required=False, allow_blank=True)

    @extend_schema(
        operation_id="calls_cancel", request=InputSerializer, parameters=[CALL_ID],
        responses={200: CallOutputSerializer, **error_responses(409, 413, 415)},
    )
    def post(self, request: Request, call_id: str) -> Response:
        """Cancel a call that is not finished (the posting client with calls:write, or a dispatcher)."""
        serializer = CallCancelApi.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        call = self.get_call(call_id)
        call_cancel(call=call, actor=request.user, reason=serializer.validated_data.get("reason", ""))
        return Response(CallOutputSerializer(self.get_call(call_id)).data)


class CallRetryApi(ApiView):
    """POST /api/v1/calls/<id>/retry/ — the posting client (calls:write) or a dispatcher retries a failed call."""

    access = {"POST": Access(client_scope=ApiClient.SCOPE_WRITE, user_check=is_dispatcher)}

    @extend_schema(
        operation_id="calls_retry", request=None, parameters=[CALL_ID],
        responses={200: CallOutputSerializer, **error_responses(409, 503)},
    )
    def post(self, request: Request, call_id: str) -> Response:
        """Generate a failed call's guidance again, at its level and arrival (409 unless the call is failed)."""
        call_retry(call=self.get_call(call_id), actor=request.user)
        return Response(CallOutputSerializer(self.get_call(call_id)).data)


class CallCollectionApi(CallListApi, CallCreateApi):
    """/api/v1/calls/: GET lists (CallListApi), POST creates (CallCreateApi).

    Methods name their action's serializers explicitly (``CallCreateApi.InputSerializer``): in this combined
    class ``self.InputSerializer`` would resolve through the MRO to the wrong action's.
    """

    access = {**CallListApi.access, **CallCreateApi.access}


class CallItemApi(CallDetailApi, CallOverrideApi):
    """/api/v1/calls/<id>/: GET reads (CallDetailApi), PATCH overrides the ESI or switches protocol
    (CallOverrideApi)."""

    access = {**CallDetailApi.access, **CallOverrideApi.access}
