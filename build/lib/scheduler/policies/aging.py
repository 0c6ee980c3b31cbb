"""Bounded aging: the effective level improves one step per ``aging_step_s`` of waiting, down to a floor.

The floor is the tier's ``aging_ceiling_level`` but never better than 2 for a request whose own level is 2
or worse: an aged ESI 5 can reach ESI 2 but never overtakes ESI 1. One step after reaching its floor a
request is *overdue*; overdue requests of an effective level go first, in arrival order, so a long request
cannot starve behind a stream of shorter ones at that level either (shortest-remaining-first alone would let
it). All functions O(1).
"""

from __future__ import annotations

from scheduler.config import TierPolicy


def aging_floor(level: int, tier: TierPolicy) -> int:
    if level <= 1:
        return level
    return min(level, max(2, tier.aging_ceiling_level))


def aging_steps(waited_s: float, tier: TierPolicy, enabled: bool) -> int:
    if not enabled or tier.aging_step_s <= 0 or waited_s <= 0:
        return 0
    return int(waited_s // tier.aging_step_s)


def effective_level(level: int, waited_s: float, tier: TierPolicy, enabled: bool) -> int:
    return max(aging_floor(level, tier), level - aging_steps(waited_s, tier, enabled))


def is_overdue(level: int, waited_s: float, tier: TierPolicy, enabled: bool) -> bool:
    """Waited one step longer than it took to reach its floor."""
    steps = aging_steps(waited_s, tier, enabled)
    return steps > 0 and steps > level - aging_floor(level, tier)


def next_aging_event_s(level: int, arrival_s: float, now_s: float, tier: TierPolicy, enabled: bool) -> float | None:
    """When the request's effective level or overdue state next changes; None when neither will."""
    if not enabled or tier.aging_step_s <= 0:
        return None
    steps = aging_steps(now_s - arrival_s, tier, enabled)
    if steps > level - aging_floor(level, tier):
        return None  # already overdue
    # A hair past the step boundary, so that floor(waited / step) has certainly advanced when it fires.
    return arrival_s + (steps + 1) * tier.aging_step_s * (1 + 1e-12) + 1e-9


def level_changes(level: int, waited_s: float, tier: TierPolicy, enabled: bool) -> list[tuple[float, int]]:
    """Each later point at which the effective level improves, as (waited seconds, level it improves to).

    What a display needs to follow aging between updates without computing it; O(level) entries. Waiting
    times are relative to arrival: on Unix-epoch clocks the step boundaries would drown in rounding.
    """
    changes: list[tuple[float, int]] = []
    current = effective_level(level, waited_s, tier, enabled)
    at_s = next_aging_event_s(level, 0.0, waited_s, tier, enabled)
    while at_s is not None:
        aged = effective_level(level, at_s, tier, enabled)
        if aged != current:
            # The step boundary itself: ``at_s`` is a hair past it, which suits a timer but not a display.
            changes.append((aging_steps(at_s, tier, enabled) * tier.aging_step_s, aged))
            current = aged
        at_s = next_aging_event_s(level, 0.0, at_s, tier, enabled)
    return changes
