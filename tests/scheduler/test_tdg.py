"""PROSERVE's token-level deadline gain, as the simulators and the live worker count it (scheduler.metrics)."""

import pytest

from scheduler.config import TierPolicy
from scheduler.metrics import FIRST_TOKEN_WEIGHT, TdgAccumulator, count_token

TIER = TierPolicy("t", (1,), ttft_target_mean_s=0.5, ttft_target_p90_s=1.0, e2e_target_mean_s=10,
                  e2e_target_p90_s=20, tdg_weight=16, tpot_target_s=0.1)


def test_token_i_is_due_at_arrival_plus_the_ttft_target_plus_i_minus_one_tpot_targets():
    tdg = TdgAccumulator()
    count_token(tdg, TIER, index=1, t_s=10.5, arrival_s=10.0)  # due 10.5: on time (at the deadline counts)
    count_token(tdg, TIER, index=3, t_s=10.7, arrival_s=10.0)  # due 10.7: on time
    count_token(tdg, TIER, index=4, t_s=10.81, arrival_s=10.0)  # due 10.8: late
    assert tdg.on_time == pytest.approx(16 * FIRST_TOKEN_WEIGHT + 16)
    assert tdg.total == pytest.approx(16 * FIRST_TOKEN_WEIGHT + 16 + 16)


def test_the_first_token_weighs_first_token_weight_times_the_tier_weight_and_the_ratio_is_gain_over_ideal():
    late_first = TdgAccumulator()
    count_token(late_first, TIER, index=1, t_s=11.0, arrival_s=10.0)
    for i in range(2, 5):  # every later token on time (each due 0.1 s after the one before, from 10.5 s)
        count_token(late_first, TIER, index=i, t_s=10.5 + 0.1 * (i - 1), arrival_s=10.0)
    assert late_first.ratio == pytest.approx(3 / (FIRST_TOKEN_WEIGHT + 3))
    assert TdgAccumulator().ratio == 1.0  # nothing delivered, nothing missed
