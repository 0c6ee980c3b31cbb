import pytest

from scheduler.config import ESI_LEVELS, TierPolicy
from scheduler.policies.aging import effective_level, level_changes


def tier(ceiling: int, step_s: float = 30.0) -> TierPolicy:
    return TierPolicy(name="t", esi_levels=ESI_LEVELS, ttft_target_mean_s=1.0, ttft_target_p90_s=2.0,
                      e2e_target_mean_s=10.0, e2e_target_p90_s=20.0, aging_step_s=step_s, aging_ceiling_level=ceiling)


@pytest.mark.parametrize("ceiling", ESI_LEVELS)
@pytest.mark.parametrize("level", ESI_LEVELS)
@pytest.mark.parametrize("waited_s", [0.0, 29.9, 30.0, 75.0, 1000.0])
def test_level_changes_name_every_later_point_where_the_effective_level_improves(ceiling, level, waited_s):
    policy = tier(ceiling)
    changes = level_changes(level, waited_s, policy, True)
    current = effective_level(level, waited_s, policy, True)
    probe_s = [waited_s + i * 0.5 for i in range(0, 600)]
    for t in probe_s:
        due = [lvl for at_s, lvl in changes if at_s <= t]
        assert (due[-1] if due else current) == effective_level(level, t, policy, True)
    assert all(at_s > waited_s for at_s, _ in changes)


def test_no_level_changes_without_aging():
    assert level_changes(5, 10.0, tier(2), False) == []
    assert level_changes(5, 10.0, tier(2, step_s=0.0), True) == []
