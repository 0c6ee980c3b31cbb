"""Scheduler configuration: the knobs an administrator edits live (docs/architecture.md §2b, Tier and SchedulerSettings).

Plain dataclasses, no Django: the inference worker builds a ``SchedulerConfig`` from the database rows and
hands it to ``make_scheduler`` (start-up) or ``scheduler.update_config`` (after a ``config`` control message).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any, TypeVar

T = TypeVar("T")

ESI_LEVELS = (1, 2, 3, 4, 5)  # ESI 1 (life-saving intervention now) .. 5 (non-urgent); lower is more urgent
MOST_URGENT, LEAST_URGENT = ESI_LEVELS[0], ESI_LEVELS[-1]
# What a request is scheduled as before triage has judged it (or when whatever sent it gave no values):
# the middle of the scale, so it neither jumps the urgent calls nor starves, and a short answer.
UNTRIAGED_LEVEL = 3
UNPREDICTED_OUTPUT_TOKENS = 64
# The levels a surge must not slow: they keep their full guidance, and only they may take the extra batch slots
# the surge controller opens (scheduler/slo.py).
PROTECTED_LEVELS = (1, 2)
TIER_NAMES = {1: "Immediate", 2: "Emergent", 3: "Urgent", 4: "Less urgent", 5: "Non-urgent"}
EVICTION_MODES = ("cost", "recompute", "swap")
STAGE_MERGE_MODES = ("level", "paper", "strict")


def tier_claiming(level: int, tiers: Iterable[T], levels: Callable[[T], Iterable[int]]) -> T | None:
    """The tier a level belongs to: the first, in the administrator's order, whose ESI levels include it (the
    one rule for the database's tiers and the scheduler's); None when no tier claims it. O(tiers)."""
    return next((tier for tier in tiers if level in levels(tier)), None)


def scheduling_level(level: int, uncertain_against: int | None) -> int:
    """The level a call is scheduled at: an uncertain call, between its level and ``uncertain_against`` (the
    other level a triage signal gave; None when it is not uncertain between two), is held at the more urgent of
    the two until a dispatcher confirms one. The cost of holding a call too urgent is a less urgent call's wait;
    the cost of the other error is an ESI-1 call's (docs/decisions/uncertain-calls-scheduled-urgent.md)."""
    return level if uncertain_against is None else min(level, clamp_level(uncertain_against))


def clamp_level(level: int) -> int:
    """The nearest ESI level (a priority from outside, e.g. vLLM's own, may be any integer)."""
    return min(LEAST_URGENT, max(MOST_URGENT, int(level)))


@dataclass(frozen=True)
class TierPolicy:
    """One tier's targets and scheduling knobs (fields named as the ``Tier`` model's)."""

    name: str
    esi_levels: tuple[int, ...]
    ttft_target_mean_s: float
    ttft_target_p90_s: float
    e2e_target_mean_s: float
    e2e_target_p90_s: float
    tdg_weight: float = 1.0
    max_preemptions: int = 8
    reserved_kv_fraction: float = 0.0
    aging_step_s: float = 0.0  # seconds of waiting per level of aging; 0: this tier does not age
    aging_ceiling_level: int = 2  # the best effective level aging can reach (never better than 2 for ESI >= 2)
    # PROSERVE's per-token deadline: token i is due at arrival + TTFT + (i - 1) * TPOT.
    tpot_target_s: float = 0.1

    def __post_init__(self) -> None:
        if not 0.0 <= self.reserved_kv_fraction <= 0.9:
            raise ValueError("reserved_kv_fraction must be in [0, 0.9]")
        if self.aging_step_s < 0:
            raise ValueError("aging_step_s must be >= 0")
        if self.aging_ceiling_level not in ESI_LEVELS:
            raise ValueError("aging_ceiling_level must be an ESI level 1..5")
        object.__setattr__(self, "esi_levels", tuple(self.esi_levels))


def default_tiers() -> dict[str, TierPolicy]:
    """One tier per ESI level, as the fixtures define them (docs/architecture.md §2b): TTFT 0.5/1/5/30/60 s,
    E2E 10/20/60/300/600 s (p90 targets twice the mean), TDG weights 16/8/4/2/1. Aging is off per tier
    (step 0) until an administrator sets a step; ``aging_enabled`` switches it globally."""
    ttft = {1: 0.5, 2: 1.0, 3: 5.0, 4: 30.0, 5: 60.0}
    e2e = {1: 10.0, 2: 20.0, 3: 60.0, 4: 300.0, 5: 600.0}
    weight = {1: 16.0, 2: 8.0, 3: 4.0, 4: 2.0, 5: 1.0}
    return {
        TIER_NAMES[level]: TierPolicy(
            name=TIER_NAMES[level],
            esi_levels=(level,),
            ttft_target_mean_s=ttft[level],
            ttft_target_p90_s=2 * ttft[level],
            e2e_target_mean_s=e2e[level],
            e2e_target_p90_s=2 * e2e[level],
            tdg_weight=weight[level],
        )
        for level in ESI_LEVELS
    }


@dataclass(frozen=True)
class SchedulerConfig:
    """Fields named as ``SchedulerSettings``; ``tiers`` maps a tier name to its policy.

    ``eviction`` chooses what happens to a KV victim: ``cost`` (the paper's cache-or-recompute rule),
    ``recompute`` (always drop) or ``swap`` (always keep on host).
    """

    policy: str = "semantic"
    batch_size: int = 16
    kv_capacity_blocks: int = 4096
    block_size: int = 16
    preempt_on_arrival: bool = True
    limited_preemption_c: float | None = None
    aging_enabled: bool = True
    tiers: Mapping[str, TierPolicy] = field(default_factory=default_tiers)
    eviction: str = "cost"
    # When the best request p* is decoding: "level" lets prefills of p*'s own level join and refills freed
    # slots with decode-ready requests; "paper" holds every prefill back (Hua et al. Algorithm 3 as written).
    # "strict" is "level" in p*'s prefill iterations too. Algorithm 3 merges every candidate into those, but a
    # prefill batch costs the sum of its prefills, so a less urgent prefill riding along delays p*'s first
    # token by its whole prefill. Under "strict" it needs the lower_prefill_share credit in either stage; with
    # a share of 0 no less urgent prefill ever shares an iteration with a more urgent request.
    stage_merge: str = "level"
    # While p* decodes, prefills of less urgent requests may still fill free batch slots, but together they
    # may take at most this share of the decode time (a credit of share x each estimated decode step, capped
    # at share x p*'s predicted remaining time): p* is slowed by at most this fraction, and free slots do not
    # stay empty at light load. 0: Algorithm 3 as written (every less urgent prefill waits for p*).
    lower_prefill_share: float = 0.2
    # Whether a waiting request may displace a running one of the same (effective) level because its predicted
    # remaining time is shorter. False: preemption is for urgency only; within a level a running request keeps
    # its slot (each displacement costs the engine a KV release and a rejoin, and refined length estimates
    # that wobble step to step would otherwise trade the same requests in and out).
    preempt_within_level: bool = True
    # TRAIL's C for the `trail` policy when limited_preemption_c is None.
    trail_default_c: float = 0.8
    # Slots past batch_size that only requests of a PROTECTED_LEVELS (effective) level may take. Set by the surge
    # controller in protect mode (scheduler/slo.py), not by an administrator: 0 outside a surge.
    surge_extra_slots: int = 0
    # Fair share across call systems within a level (weighted VTC, policies/fair_share.py): a call system's
    # weight (default 1); off: the policy's order across call systems, however many calls one of them sends.
    client_weights: Mapping[str, float] = field(default_factory=dict)
    fair_share: bool = True

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if self.kv_capacity_blocks < 1 or self.block_size < 1:
            raise ValueError("kv_capacity_blocks and block_size must be >= 1")
        if self.eviction not in EVICTION_MODES:
            raise ValueError(f"eviction must be one of {EVICTION_MODES}")
        if self.stage_merge not in STAGE_MERGE_MODES:
            raise ValueError(f"stage_merge must be one of {STAGE_MERGE_MODES}")
        if self.surge_extra_slots < 0:
            raise ValueError("surge_extra_slots must be >= 0")
        if not 0.0 <= self.lower_prefill_share < 1.0:
            raise ValueError("lower_prefill_share must be in [0, 1)")
        if self.limited_preemption_c is not None and self.limited_preemption_c < 0:
            raise ValueError("limited_preemption_c must be >= 0 or None")
        if sum(t.reserved_kv_fraction for t in self.tiers.values()) > 0.9:
            raise ValueError("reserved KV fractions must sum to at most 0.9")
        if any(w <= 0 for w in self.client_weights.values()):
            raise ValueError("client weights must be > 0")
        object.__setattr__(self, "tiers", dict(self.tiers))
        object.__setattr__(self, "client_weights", dict(self.client_weights))

    @property
    def kv_capacity_tokens(self) -> int:
        return self.kv_capacity_blocks * self.block_size

    def tier_for(self, tier: str | None, level: int) -> TierPolicy:
        """The named tier if configured, else the first tier listing ``level``; O(tiers)."""
        if tier is not None and tier in self.tiers:
            return self.tiers[tier]
        return tier_claiming(level, self.tiers.values(), lambda policy: policy.esi_levels) or _FALLBACK_TIER

    def with_changes(self, **changes: Any) -> SchedulerConfig:
        return replace(self, **changes)

    def with_tier_changes(self, **changes: Any) -> SchedulerConfig:
        """The same change (e.g. ``aging_step_s=30``) applied to every tier."""
        return replace(self, tiers={name: replace(t, **changes) for name, t in self.tiers.items()})

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["tiers"] = {name: asdict(t) for name, t in self.tiers.items()}
        for t in data["tiers"].values():
            t["esi_levels"] = list(t["esi_levels"])
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SchedulerConfig:
        data = dict(data)
        if "tiers" in data:
            data["tiers"] = {name: TierPolicy(**t) for name, t in data["tiers"].items()}
        return cls(**data)


_FALLBACK_TIER = TierPolicy(
    name="default", esi_levels=(), ttft_target_mean_s=60.0, ttft_target_p90_s=120.0,
    e2e_target_mean_s=600.0, e2e_target_p90_s=1200.0,
)
