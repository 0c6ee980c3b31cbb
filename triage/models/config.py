"""The centre's configuration, edited in the admin: tiers, scheduler settings and dispatch priorities."""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from scheduler.config import ESI_LEVELS, EVICTION_MODES, STAGE_MERGE_MODES, SchedulerConfig, TierPolicy
from scheduler.policies import POLICIES
from triage.decision_points import DecisionPoint
from triage.dispatch_priority import ResponseMode, validate_protocol_id, validate_resources

ESI_VALIDATORS = [MinValueValidator(min(ESI_LEVELS)), MaxValueValidator(max(ESI_LEVELS))]


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
    # The board's alerts (static/js/board.js): the centre's policy for how loud an unacknowledged call is.
    alert_repeat_s = models.FloatField(
        default=0, validators=[MinValueValidator(0)],
        help_text="An unacknowledged call of this tier sounds on the board every this many seconds until someone "
                  "acknowledges it (0: silent)",
    )
    acknowledge_within_s = models.FloatField(
        default=0, validators=[MinValueValidator(0)],
        help_text="A call of this tier nobody has acknowledged this long after its triage is escalated to the "
                  "supervisors (0: never)",
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
