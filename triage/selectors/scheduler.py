"""The live scheduler configuration, read from the database as the scheduler's own dataclasses.

The inference worker schedules with it; the board orders and ages its queue with the same one, so that what
a dispatcher sees is what the scheduler does.
"""

from __future__ import annotations

from scheduler.config import SchedulerConfig
from triage.models import ApiClient, SchedulerSettings, Tier


def scheduler_config_load(*, base: SchedulerConfig | None = None) -> SchedulerConfig:
    """The SchedulerSettings row and the tiers over ``base`` (the scheduler's defaults when None)."""
    s = SchedulerSettings.current()
    tiers = {t.name: t.policy() for t in Tier.objects.all()}
    base = base or SchedulerConfig()
    return base.with_changes(
        policy=s.policy, batch_size=s.batch_size, kv_capacity_blocks=s.kv_capacity_blocks, block_size=s.block_size,
        preempt_on_arrival=s.preempt_on_arrival, preempt_within_level=s.preempt_within_level,
        limited_preemption_c=s.limited_preemption_c, aging_enabled=s.aging_enabled, stage_merge=s.stage_merge,
        lower_prefill_share=s.lower_prefill_share, eviction=s.eviction, tiers=tiers or base.tiers,
        client_weights=dict(ApiClient.objects.exclude(share_weight=1).values_list("name", "share_weight")),
    )


def guard_similarity_threshold_load() -> float | None:
    """The stream guard's mode from the settings: None is strict (the protocol's own sentences only)."""
    return SchedulerSettings.current().guard_similarity_threshold
