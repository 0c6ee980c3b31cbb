"""The dispatch domain: calls, their triage, tiers, scheduler settings, API clients and the audit log."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from scheduler.config import ESI_LEVELS, EVICTION_MODES, STAGE_MERGE_MODES, SchedulerConfig, TierPolicy
from scheduler.policies import POLICIES
from triage.audit_actions import AuditAction
from triage.call_status import (  # noqa: F401 - re-exported: most modules look for them here
    ACTIVE_STATUSES,
    ALLOWED_TRANSITIONS,
    BEFORE_STREAM_STATUSES,
    FINAL_STATUSES,
    IN_STREAM_STATUSES,
    STATUS_TIMESTAMP_FIELD,
    SWITCHABLE_STATUSES,
    TO_CLOSE_STATUSES,
    CallStatus,
    Lifecycle,
    lifecycle_of,
)
from triage.decision_points import DecisionPoint
from triage.dispatch_priority import ResponseMode, validate_protocol_id, validate_resources

ESI_VALIDATORS = [MinValueValidator(min(ESI_LEVELS)), MaxValueValidator(max(ESI_LEVELS))]


class ApiClient(models.Model):
    """A call-handling system allowed to post calls. Only a hash of its token is stored."""

    SCOPE_WRITE = "calls:write"
    SCOPE_READ = "calls:read"
    ALL_SCOPES = (SCOPE_WRITE, SCOPE_READ)

    name = models.CharField(max_length=100, unique=True)
    token_prefix = models.CharField(max_length=12, unique=True, editable=False)
    token_hash = models.CharField(max_length=128, editable=False)
    scopes = models.JSONField(default=list)
    throttle_rate = models.CharField(
        max_length=20, blank=True, help_text='Requests per period, e.g. "600/min"; empty: the default intake rate'
    )
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    rotated_at = models.DateTimeField(null=True, blank=True)
    # After a rotation the previous token works too, until then: a 24/7 call system switches without a gap.
    token_previous_prefix = models.CharField(max_length=12, blank=True, db_index=True, editable=False)
    token_previous_hash = models.CharField(max_length=128, blank=True, editable=False)
    token_previous_until = models.DateTimeField(null=True, blank=True, editable=False)
    webhook_url = models.URLField(
        max_length=500, blank=True, help_text="http(s) URL that receives call.triaged/done/failed (empty: none)"
    )
    # Kept in clear, unlike the token: signing needs the secret itself (HMAC-SHA256, docs/call-systems.md).
    webhook_secret = models.CharField(max_length=100, blank=True, editable=False)
    # After a rotation the previous secret signs too, until then: a receiver can switch without a gap.
    webhook_secret_previous = models.CharField(max_length=100, blank=True, editable=False)
    webhook_secret_previous_until = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def has_scope(self, scope: str) -> bool:
        return scope in self.scopes

    # DRF treats request.user as a user; an ApiClient stands in for one.
    @property
    def is_authenticated(self) -> bool:
        return True


class Tier(models.Model):
    """A priority tier with its service-level targets and scheduling knobs (docs/architecture.md §2b)."""

    name = models.CharField(max_length=50, unique=True)
    colour = models.CharField(max_length=7, default="#888888", help_text="Hex colour, e.g. #d32f2f")
    sort_order = models.PositiveSmallIntegerField(default=0)
    esi_levels = models.JSONField(default=list, help_text="ESI levels (1–5) that fall in this tier")
    ttft_target_mean_s = models.FloatField(validators=[MinValueValidator(0)])
    ttft_target_p90_s = models.FloatField(validators=[MinValueValidator(0)])
    e2e_target_mean_s = models.FloatField(validators=[MinValueValidator(0)])
    e2e_target_p90_s = models.FloatField(validators=[MinValueValidator(0)])
    tpot_target_s = models.FloatField(
        default=TierPolicy.tpot_target_s, validators=[MinValueValidator(0)],
        help_text="Seconds per guidance token after the first (a stream paused mid-sentence misses it)",
    )
    tdg_weight = models.FloatField(default=1.0, validators=[MinValueValidator(0)])
    max_preemptions = models.PositiveSmallIntegerField(default=8)
    reserved_kv_fraction = models.FloatField(default=0.0, validators=[MinValueValidator(0), MaxValueValidator(0.9)])
    aging_step_s = models.FloatField(
        default=0.0, validators=[MinValueValidator(0)], help_text="Seconds of waiting per level of aging (0: off)"
    )
    aging_ceiling_level = models.PositiveSmallIntegerField(
        default=TierPolicy.aging_ceiling_level, validators=ESI_VALIDATORS,
        help_text="The best level aging can reach; never better than 2 for a call of ESI 2 or worse",
    )

    class Meta:
        ordering = ["sort_order", "name"]

    def __str__(self) -> str:
        return self.name

    def policy(self) -> TierPolicy:
        """The tier as the scheduler sees it."""
        return TierPolicy(
            name=self.name, esi_levels=tuple(self.esi_levels or ()), ttft_target_mean_s=self.ttft_target_mean_s,
            ttft_target_p90_s=self.ttft_target_p90_s, e2e_target_mean_s=self.e2e_target_mean_s,
            e2e_target_p90_s=self.e2e_target_p90_s, tpot_target_s=self.tpot_target_s, tdg_weight=self.tdg_weight,
            max_preemptions=self.max_preemptions, reserved_kv_fraction=self.reserved_kv_fraction, aging_step_s=self.aging_step_s,
            aging_ceiling_level=self.aging_ceiling_level,
        )


class SchedulerSettings(models.Model):
    """The one row of scheduler configuration the inference worker applies live."""

    policy = models.CharField(max_length=20, choices=[(name, name) for name in POLICIES],
                              default=SchedulerConfig.policy)
    batch_size = models.PositiveSmallIntegerField(default=SchedulerConfig.batch_size, validators=[MinValueValidator(1)])
    kv_capacity_blocks = models.PositiveIntegerField(default=2048, validators=[MinValueValidator(1)])
    block_size = models.PositiveSmallIntegerField(default=16, validators=[MinValueValidator(1)])
    preempt_on_arrival = models.BooleanField(default=True)
    preempt_within_level = models.BooleanField(
        default=True,
        help_text="A shorter request of the same level may displace a running one (off: only a more urgent level does)",
    )
    limited_preemption_c = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(0)],
        help_text="Non-preemptible after C × predicted length (TRAIL); empty: always preemptible",
    )
    aging_enabled = models.BooleanField(default=True)
    stage_merge = models.CharField(
        max_length=10, choices=[(m, m) for m in STAGE_MERGE_MODES], default=SchedulerConfig.stage_merge,
        help_text="What may join the most urgent request's iterations. level: same-level prefills join its decode "
        "steps; paper: none (Hua et al. Algorithm 3); strict: as level, and less urgent prefills stay out of its "
        "prefill iterations too",
    )
    lower_prefill_share = models.FloatField(
        default=SchedulerConfig.lower_prefill_share, validators=[MinValueValidator(0), MaxValueValidator(0.9)],
        help_text="Share of the most urgent request's time that less urgent prefills may take to fill free batch "
        "slots. 0 with stage merge strict: strict priority, for a mass-casualty incident (at light load it makes "
        "less urgent calls wait several times longer)",
    )
    eviction = models.CharField(
        max_length=10, choices=[(m, m) for m in EVICTION_MODES], default=SchedulerConfig.eviction,
        help_text="KV of a preempted request when memory binds: cost (keep or recompute, whichever is cheaper), "
        "recompute (always drop), swap (always keep in host memory)",
    )
    micro_batch_max = models.PositiveSmallIntegerField(default=32, validators=[MinValueValidator(1)])
    # 0: a triage worker takes whatever waits at once (docs/decisions/predictor-stage-batching.md)
    micro_batch_wait_ms = models.PositiveIntegerField(default=0)
    guard_similarity_threshold = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(0), MaxValueValidator(1)],
        help_text="Empty (the default, and the only safe choice for the bundled model): the stream guard accepts only "
        "the protocol's own sentences. For a validated instruction model (INFERENCE_MODEL): the cosine similarity "
        "(all-MiniLM-L6-v2) a generated sentence needs to its closest protocol sentence (BENCHMARKS.md: guard)",
    )
    version = models.PositiveIntegerField(default=1, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "scheduler settings"
        verbose_name_plural = "scheduler settings"

    def __str__(self) -> str:
        return f"Scheduler settings (v{self.version}, {self.policy})"

    @classmethod
    def load(cls) -> SchedulerSettings:
        """The row, created with the defaults if there is none yet (for writers: services, the admin)."""
        obj, _ = cls.objects.get_or_create(pk=1)
        return obj

    @classmethod
    def current(cls) -> SchedulerSettings:
        """The settings in force, without writing: the row, or the defaults (unsaved) while there is none."""
        return cls.objects.filter(pk=1).first() or cls(pk=1)


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
    off_protocol_sentences = models.PositiveIntegerField(
        default=0, help_text="Sentences the stream guard found off protocol; when any, the guidance stored and "
        "shown is the protocol's own text"
    )
    # Bumped when the dispatcher switches protocol: a result generated before the switch is not stored.
    guidance_generation = models.PositiveIntegerField(default=0)

    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
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


class DispatchPriorityRule(models.Model):
    """The centre's priority, response mode and units for calls of an ESI level, optionally narrowed to the
    decision point that set it and the protocol (the most specific rule wins: triage/dispatch_priority.py)."""

    esi_level = models.PositiveSmallIntegerField(validators=ESI_VALIDATORS)
    decision_point = models.CharField(max_length=1, choices=DecisionPoint.choices, blank=True, help_text="Empty: any")
    protocol = models.CharField(max_length=40, blank=True, validators=[validate_protocol_id],
                                help_text="A protocol id (fixtures/guidance/protocols/, e.g. cardiac_arrest); empty: any")
    priority_code = models.CharField(max_length=20, help_text="The CAD's own priority, e.g. 1, P2, Echo")
    response_mode = models.CharField(max_length=4, choices=ResponseMode.choices)
    resources = models.JSONField(default=list, blank=True, validators=[validate_resources],
                                 help_text='Units to send, e.g. [{"unit": "ALS", "count": 1, "lights_and_sirens": true}]')
    note = models.CharField(max_length=300, blank=True, help_text="Why, and on whose authority (the medical director)")

    class Meta:
        ordering = ["esi_level", "decision_point", "protocol"]
        constraints = [models.UniqueConstraint(fields=["esi_level", "decision_point", "protocol"], name="one_dispatch_rule_per_key")]

    def __str__(self) -> str:
        return f"ESI {self.esi_level} {self.decision_point or '*'} {self.protocol or '*'}: {self.priority_code}"


class AuditEventQuerySet(models.QuerySet):
    def update(self, **kwargs):  # noqa: ANN003
        raise PermissionError("the audit log is append-only")

    def delete(self):
        raise PermissionError("the audit log is append-only")


class AuditEvent(models.Model):
    """Append-only record of every state change and override, with its actor."""

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    call = models.ForeignKey(Call, on_delete=models.PROTECT, null=True, blank=True, related_name="audit_events")
    action = models.CharField(max_length=50, choices=AuditAction.choices, db_index=True)
    from_status = models.CharField(max_length=20, blank=True)
    to_status = models.CharField(max_length=20, blank=True)
    actor = models.CharField(max_length=150, help_text="user:<name>, client:<name> or system:<process>")
    actor_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    data = models.JSONField(default=dict, blank=True)

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.actor} {self.action}"

    def save(self, *args, **kwargs):  # noqa: ANN002, ANN003
        if self.pk is not None:
            raise PermissionError("the audit log is append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):  # noqa: ANN002, ANN003
        raise PermissionError("the audit log is append-only")


class WebhookDelivery(models.Model):
    """One attempt to POST one event to a client's webhook: append-only, shown read-only in the admin."""

    class Outcome(models.TextChoices):
        DELIVERED = "delivered"  # a 2xx answer
        RETRYING = "retrying"  # failed; another attempt is scheduled
        GAVE_UP = "gave_up"  # failed on the last attempt (WEBHOOK_MAX_ATTEMPTS)
        SKIPPED = "skipped"  # nothing sent: no URL any more, client inactive, or a refused address

    client = models.ForeignKey(ApiClient, on_delete=models.PROTECT, related_name="webhook_deliveries")
    call = models.ForeignKey(Call, on_delete=models.PROTECT, null=True, blank=True, related_name="webhook_deliveries")
    event_id = models.UUIDField(db_index=True, help_text="The event's id, the same in every attempt (X-Triage-Event-Id)")
    event = models.CharField(max_length=30, help_text="The event type, e.g. call.triaged, call.done, webhook.ping")
    url = models.CharField(max_length=500, blank=True)
    attempt = models.PositiveSmallIntegerField()
    outcome = models.CharField(max_length=10, choices=Outcome.choices)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    duration_ms = models.FloatField(default=0)
    payload = models.JSONField(default=dict, blank=True, help_text="The event as sent: what a resend sends again")

    class Meta:
        ordering = ["-started_at", "-id"]
        indexes = [models.Index(fields=["client", "started_at"])]
        verbose_name_plural = "webhook deliveries"

    def __str__(self) -> str:
        return f"{self.event} #{self.attempt} to {self.client} ({self.outcome})"
