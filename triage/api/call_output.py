"""How the API shows a call: its state, timestamps, assessment, selected protocol and the centre's dispatch
priority. Every endpoint that answers with a call uses ``CallOutputSerializer``."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from triage.dispatch_priority import ResponseMode
from triage.models import Call, CallStatus, DecisionPoint, Lifecycle
from triage.selectors.dispatch_priorities import call_dispatch_priority, dispatch_priority_table


class ResourceOutputSerializer(serializers.Serializer):
    unit = serializers.CharField(help_text="A unit type, e.g. ALS, BLS, fire/rescue")
    count = serializers.IntegerField(min_value=1)
    lights_and_sirens = serializers.BooleanField()


class DispatchPriorityOutputSerializer(serializers.Serializer):
    priority_code = serializers.CharField(help_text="The centre's own priority code")
    response_mode = serializers.ChoiceField(choices=ResponseMode.choices)
    resources = ResourceOutputSerializer(many=True, help_text="The units to send")
    rule_id = serializers.IntegerField(help_text="The table's rule that applied")
    note = serializers.CharField(allow_blank=True, help_text="The rule's rationale and source")


class ProtocolSelectionOutputSerializer(serializers.Serializer):
    """The dispatch protocol the guidance follows ("unclear": the family's key questions are read)."""

    id = serializers.CharField(source="protocol", help_text='A protocol id of the library, or "unclear"')
    version = serializers.IntegerField(source="protocol_version", allow_null=True)
    confidence = serializers.FloatField(source="protocol_confidence", allow_null=True)
    likeliest = serializers.CharField(source="protocol_likeliest", help_text="The top protocol, even when unclear")
    runner_up = serializers.CharField(source="protocol_runner_up")
    runner_up_confidence = serializers.FloatField(source="protocol_runner_up_confidence", allow_null=True)
    family = serializers.CharField(source="protocol_family")
    library = serializers.CharField(source="protocol_library", help_text="Protocol library version")
    switched_by = serializers.CharField(source="protocol_switched_by.get_username", allow_null=True, default=None,
                                        help_text="The dispatcher who switched to this protocol (null: the selector's)")


class AssessmentOutputSerializer(serializers.Serializer):
    predicted_esi = serializers.IntegerField()
    probabilities = serializers.ListField(child=serializers.FloatField(), min_length=5, max_length=5)
    predicted_output_tokens = serializers.IntegerField()
    model_version = serializers.CharField()
    latency_ms = serializers.FloatField()
    decision_point = serializers.ChoiceField(
        choices=DecisionPoint.choices, help_text="The ESI decision point that decided the level (A, B, C or D)"
    )
    reasons = serializers.ListField(
        child=serializers.CharField(), help_text='Why this level, e.g. ["B: fever during chemotherapy"]'
    )
    uncertain = serializers.BooleanField(help_text="Algorithm and model disagree or the probability is split")
    alternative_esi = serializers.IntegerField(
        allow_null=True, help_text="Uncertain: the other level a triage signal gave. The call is scheduled at the more "
                                   "urgent of the two until a dispatcher confirms one")
    level_confirmed_at = serializers.DateTimeField(allow_null=True)
    level_confirmed_by = serializers.CharField(source="level_confirmed_by.get_username", allow_null=True, default=None)
    findings = serializers.ListField(child=serializers.CharField(), help_text="What the caller said, as findings")
    catalogue_version = serializers.CharField(allow_blank=True)
    narrative_revision = serializers.IntegerField(
        help_text="The call's narrative revision this verdict read: below the call's, a re-triage is on its way")
    protocol = ProtocolSelectionOutputSerializer(source="*", help_text="The dispatch protocol selected for the call")
    override_esi = serializers.IntegerField(allow_null=True)
    override_reason = serializers.CharField(allow_blank=True)
    override_disputed_reason = serializers.CharField(allow_blank=True)
    overridden_at = serializers.DateTimeField(allow_null=True)
    overridden_by = serializers.CharField(source="overridden_by.get_username", allow_null=True, default=None)


class CallOutputSerializer(serializers.Serializer):
    """A call with its state, timestamps and assessment."""

    id = serializers.IntegerField()
    external_id = serializers.CharField()
    lifecycle = serializers.ChoiceField(
        choices=Lifecycle.choices, help_text="Where the call is, in stable public terms: integrate against this")
    status = serializers.ChoiceField(
        choices=CallStatus.choices, help_text="The engine's state, a diagnostic: its values follow the scheduler")
    esi = serializers.IntegerField(source="level", allow_null=True, help_text="Effective ESI (override included)")
    tier = serializers.CharField(source="tier.name", allow_null=True, default=None)
    received_at = serializers.DateTimeField()
    created_at = serializers.DateTimeField()
    status_changed_at = serializers.DateTimeField()
    triaged_at = serializers.DateTimeField(allow_null=True)
    queued_at = serializers.DateTimeField(allow_null=True)
    prefill_started_at = serializers.DateTimeField(allow_null=True)
    first_token_at = serializers.DateTimeField(allow_null=True)
    done_at = serializers.DateTimeField(allow_null=True)
    failed_at = serializers.DateTimeField(allow_null=True)
    cancelled_at = serializers.DateTimeField(allow_null=True)
    preemption_count = serializers.IntegerField()
    transcript = serializers.CharField()
    caller_name = serializers.CharField(allow_blank=True)
    caller_phone = serializers.CharField(allow_blank=True)
    caller_relation = serializers.CharField(allow_blank=True)
    location_address = serializers.CharField(allow_blank=True)
    location_lat = serializers.FloatField(allow_null=True)
    location_lon = serializers.FloatField(allow_null=True)
    location_uncertainty_m = serializers.FloatField(allow_null=True, help_text="Radius of the location's uncertainty")
    narrative_revision = serializers.IntegerField(
        help_text="How many updates have added narrative to the transcript (POST calls/<id>/updates/)")
    incident = serializers.IntegerField(
        source="incident_id", allow_null=True,
        help_text="The incident the call was linked to (other callers about the same event: GET calls/?incident=)")
    incident_confirmed = serializers.SerializerMethodField(
        help_text="A dispatcher confirmed the link (false: proposed by the linker)")
    guidance_shared_from = serializers.IntegerField(
        source="guidance_source_id", allow_null=True,
        help_text="The linked call whose guidance this call takes instead of generating its own (same protocol)")
    guidance = serializers.CharField(allow_blank=True)
    guidance_protocol = serializers.CharField(allow_blank=True, help_text='The protocol the guidance read out, or "unclear"')
    guidance_protocol_version = serializers.IntegerField(allow_null=True)
    guidance_brief = serializers.BooleanField(
        help_text="The guidance is the protocol's key questions only: generated while the centre's surge controller "
                  "protected ESI 1-2 (a dispatcher may generate it again in full)")
    off_protocol = serializers.SerializerMethodField(
        help_text="The stream guard found a sentence off protocol: `guidance` is the protocol's own text"
    )
    assessment = serializers.SerializerMethodField()
    dispatch_priority = serializers.SerializerMethodField(
        help_text="The centre's priority, response mode and units for this call (its dispatch-priority table); "
                  "null while it is not triaged or no rule covers its level")

    def get_incident_confirmed(self, call: Call) -> bool:
        return call.incident_confirmed_at is not None

    def get_off_protocol(self, call: Call) -> bool:
        return call.off_protocol_sentences > 0

    @extend_schema_field(DispatchPriorityOutputSerializer(allow_null=True))
    def get_dispatch_priority(self, call: Call) -> dict[str, Any] | None:
        # one read of the table for a whole page of calls: the list's children share the context
        table = self.context.setdefault("dispatch_priority_table", dispatch_priority_table())
        priority = call_dispatch_priority(call, table=table)
        return priority.as_dict() if priority is not None else None

    @extend_schema_field(AssessmentOutputSerializer(allow_null=True))
    def get_assessment(self, call: Call) -> dict[str, Any] | None:
        assessment = getattr(call, "assessment", None)
        return AssessmentOutputSerializer(assessment).data if assessment is not None else None
