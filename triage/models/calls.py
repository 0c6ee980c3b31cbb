"""Calls and their triage."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from triage.call_status import ACTIVE_STATUSES, CallStatus, lifecycle_of
from triage.decision_points import DecisionPoint

from .clients import ApiClient
from .config import ESI_VALIDATORS, Tier


class Call(models.Model):
    client = models.ForeignKey(ApiClient, on_delete=models.PROTECT, related_name="calls", null=True, blank=True)
    external_id = models.CharField(max_length=100)
    received_at = models.DateTimeField(help_text="When the call system received the call")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    transcript = models.TextField()
    caller_name = models.CharField(max_length=200, blank=True)
    caller_phone = models.CharField(max_length=40, blank=True)
    caller_relation = models.CharField(max_length=40, blank=True, help_text="patient, relative, bystander, …")
    location_address = models.CharField(max_length=300, blank=True)
    location_lat = models.FloatField(null=True, blank=True)
    location_lon = models.FloatField(null=True, blank=True)
    location_uncertainty_m = models.FloatField(null=True, blank=True, help_text="Radius of the location's uncertainty")
    # The body as first posted (transcript, caller, location, received_at): a retry under the same external_id
    # must match it, although updates have since grown the transcript and moved the location.
    intake = models.JSONField(default=dict, blank=True, editable=False)
    # How many updates have added narrative to the transcript; an assessment records the revision it read.
    narrative_revision = models.PositiveIntegerField(default=0, editable=False)

    status = models.CharField(max_length=20, choices=CallStatus.choices, default=CallStatus.RECEIVED, db_index=True)
    status_changed_at = models.DateTimeField(auto_now_add=True)
    triaged_at = models.DateTimeField(null=True, blank=True)
    queued_at = models.DateTimeField(null=True, blank=True)
    prefill_started_at = models.DateTimeField(null=True, blank=True)
    first_token_at = models.DateTimeField(null=True, blank=True)
    last_preempted_at = models.DateTimeField(null=True, blank=True)
    done_at = models.DateTimeField(null=True, blank=True)
    failed_at = models.DateTimeField(null=True, blank=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)

    # The level the scheduler uses: the classifier's ESI, or the dispatcher's override.
    level = models.PositiveSmallIntegerField(null=True, blank=True, validators=ESI_VALIDATORS, db_index=True)
    tier = models.ForeignKey(Tier, on_delete=models.SET_NULL, null=True, blank=True, related_name="calls")
    preemption_count = models.PositiveIntegerField(default=0)
    guidance = models.TextField(blank=True)
    output_tokens = models.PositiveIntegerField(default=0)
    failure_reason = models.CharField(max_length=300, blank=True)
    # The plan the guidance was generated under (inference.guidance.plan), and what the stream guard found.
    guidance_protocol = models.CharField(max_length=40, blank=True, help_text='Protocol id read out, or "unclear"')
    guidance_protocol_version = models.PositiveSmallIntegerField(null=True, blank=True)
    guidance_band = models.CharField(max_length=8, blank=True, help_text="The ESI band whose text was read out")
    guidance_brief = models.BooleanField(
        default=False, help_text="The guidance is the protocol's key questions only: generated while the surge "
        "controller protected ESI 1-2 (audited call.guidance_brief)")
    off_protocol_sentences = models.PositiveIntegerField(
        default=0, help_text="Sentences the stream guard found off protocol; when any, the guidance stored and "
        "shown is the protocol's own text"
    )
    # Bumped when the dispatcher switches protocol: a result generated before the switch is not stored.
    guidance_generation = models.PositiveIntegerField(default=0)

    acknowledged_at = models.DateTimeField(null=True, blank=True)
    # not acknowledged within its tier's acknowledge_within_s: recorded by the sweep (services/board.py)
    escalated_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    # linked calls (services/incidents.py): the incident the call was linked to, whether a dispatcher confirmed
    # the link, whether one split it out (never proposed again), and the call whose guidance it shares
    incident = models.ForeignKey("triage.Incident", on_delete=models.SET_NULL, null=True, blank=True,
                                 related_name="calls")
    incident_confirmed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    incident_confirmed_at = models.DateTimeField(null=True, blank=True)
    incident_split = models.BooleanField(default=False)
    guidance_source = models.ForeignKey("self", on_delete=models.SET_NULL, null=True, blank=True,
                                        related_name="guidance_followers")
    # who works the call: a dispatcher's claim or a supervisor's assignment (services/assignments.py)
    assigned_to = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    assigned_at = models.DateTimeField(null=True, blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["client", "external_id"], name="call_unique_external_id_per_client"),
        ]
        indexes = [models.Index(fields=["status", "level", "created_at"])]

    def __str__(self) -> str:
        return f"Call {self.pk} ({self.external_id}, {self.status})"

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE_STATUSES

    @property
    def lifecycle(self) -> str:
        return lifecycle_of(self.status, closed=self.closed_at is not None)


class TriageAssessment(models.Model):
    """The classifiers' verdict on a call, why, and a dispatcher's override of it."""

    call = models.OneToOneField(Call, on_delete=models.CASCADE, related_name="assessment")
    predicted_esi = models.PositiveSmallIntegerField(validators=ESI_VALIDATORS)
    probabilities = models.JSONField(help_text="P(ESI=1..5)")
    predicted_output_tokens = models.PositiveIntegerField()
    model_version = models.CharField(max_length=100)
    latency_ms = models.FloatField(help_text="Classifier time per call in its micro-batch")
    created_at = models.DateTimeField(auto_now_add=True)
    decision_point = models.CharField(max_length=1, choices=DecisionPoint.choices, default=DecisionPoint.C)
    reasons = models.JSONField(default=list, blank=True, help_text='Why this level, e.g. ["B: fever during chemotherapy"]')
    uncertain = models.BooleanField(
        default=False, help_text="The algorithm and the model disagree, or the probability is split: a dispatcher should look"
    )
    alternative_esi = models.PositiveSmallIntegerField(
        null=True, blank=True, validators=ESI_VALIDATORS,
        help_text="Uncertain: the other level a triage signal gave. The call is held at the more urgent of the two "
                  "until a dispatcher confirms one",
    )
    level_confirmed_by = models.ForeignKey(settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True, related_name="+")
    level_confirmed_at = models.DateTimeField(null=True, blank=True)
    findings = models.JSONField(default=list, blank=True, help_text="What the caller said, as clinical findings")
    catalogue_version = models.CharField(max_length=60, blank=True, help_text="Clinical catalogue the verdict used")
    patient_age = models.FloatField(null=True, blank=True, help_text="The patient's age in years, as read from the call")
    narrative_revision = models.PositiveIntegerField(
        default=0, help_text="The call's narrative revision this verdict read (0: the transcript as first posted)")
    protocol = models.CharField(
        max_length=40, blank=True, help_text='Dispatch protocol selected (fixtures/guidance/protocols/), or "unclear"'
    )
    protocol_version = models.PositiveSmallIntegerField(null=True, blank=True, help_text="Version of that protocol")
    protocol_confidence = models.FloatField(null=True, blank=True, help_text="The selector's probability of its top protocol")
    protocol_likeliest = models.CharField(max_length=40, blank=True, help_text="The top protocol, even when unclear")
    protocol_runner_up = models.CharField(max_length=40, blank=True)
    protocol_runner_up_confidence = models.FloatField(null=True, blank=True)
    protocol_family = models.CharField(max_length=40, blank=True, help_text="Family of the top protocol")
    protocol_library = models.CharField(max_length=60, blank=True, help_text="Protocol library version the selection used")
    protocol_switched_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+",
        help_text="The dispatcher who switched the protocol (then `protocol` is their choice, not the selector's)",
    )
    protocol_switched_at = models.DateTimeField(null=True, blank=True)

    override_esi = models.PositiveSmallIntegerField(null=True, blank=True, validators=ESI_VALIDATORS)
    overridden_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    overridden_at = models.DateTimeField(null=True, blank=True)
    override_reason = models.TextField(blank=True)
    override_disputed_reason = models.CharField(
        max_length=300, blank=True, help_text="The assessment's reason the dispatcher disagreed with"
    )

    @property
    def awaiting_confirmation(self) -> bool:
        """Uncertain between two levels, and no dispatcher has confirmed one or overridden the level yet."""
        return self.alternative_esi is not None and self.level_confirmed_at is None and self.override_esi is None
