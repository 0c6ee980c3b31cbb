"""The cost model's online correction (scheduler/cost_correction.py): the momentum rule, what it skips and clips,
the corrected model, and a scheduler that takes a new cost model between decisions."""

from __future__ import annotations

import pytest

from scheduler.cost import PRESETS, CostModel
from scheduler.cost_correction import (
    MIN_PREDICTED_S,
    RATIO_MAX,
    RATIO_MIN,
    CostCorrector,
    OnlineCorrection,
    corrected_cost_model,
)
from scheduler.decision import Decision
from scheduler.request import Request, Stage
from scheduler.simulator import iteration_s
from tests.scheduler.helpers import COST, req, sched, step

OVERHEAD = CostModel(alpha1=1e-7, alpha2=1e-4, gamma1=1e-6, gamma2=0.02, beta_s_per_token=1e-4,
                     iteration_overhead_s=0.003)


def test_one_observation_of_ratio_3_moves_the_factor_from_1_to_1_2():
    correction = OnlineCorrection(momentum=0.9)
    assert correction.factor == 1.0
    assert correction.observe(predicted_s=0.01, measured_s=0.03)
    assert correction.factor == pytest.approx(0.9 * 1.0 + 0.1 * 3.0) == pytest.approx(1.2)


def test_the_factor_is_the_momentum_average_of_measured_over_predicted():
    correction = OnlineCorrection(momentum=0.9)
    correction.observe(0.01, 0.03)  # 1.2
    correction.observe(0.02, 0.01)  # 0.9 * 1.2 + 0.1 * 0.5
    assert correction.factor == pytest.approx(1.13)
    assert correction.samples == 2
    instant = OnlineCorrection(momentum=0.0)
    instant.observe(0.01, 0.004)
    assert instant.factor == pytest.approx(0.4)


def test_a_prediction_below_the_floor_is_skipped():
    correction = OnlineCorrection()
    assert not correction.observe(predicted_s=MIN_PREDICTED_S / 2, measured_s=0.5)
    assert not correction.observe(predicted_s=0.0, measured_s=0.5)
    assert correction.factor == 1.0 and correction.samples == 0


def test_one_stall_or_one_instant_step_is_clipped_so_it_cannot_wreck_the_factor():
    stalled = OnlineCorrection(momentum=0.9)
    stalled.observe(predicted_s=0.01, measured_s=5.0)  # 500 times the prediction: counted as RATIO_MAX
    assert stalled.factor == pytest.approx(0.9 + 0.1 * RATIO_MAX) == pytest.approx(2.9)
    instant = OnlineCorrection(momentum=0.9)
    instant.observe(predicted_s=0.01, measured_s=0.0)
    assert instant.factor == pytest.approx(0.9 + 0.1 * RATIO_MIN)


def test_a_momentum_outside_0_1_is_refused():
    with pytest.raises(ValueError):
        OnlineCorrection(momentum=1.5)


def test_the_corrected_model_scales_the_compute_coefficients_and_keeps_beta_and_the_capacity():
    base = PRESETS["a100-4b"]
    corrected = corrected_cost_model(OVERHEAD, 2.5)
    for name in ("alpha1", "alpha2", "gamma1", "gamma2", "iteration_overhead_s"):
        assert getattr(corrected, name) == pytest.approx(2.5 * getattr(OVERHEAD, name)), name
    assert corrected.beta_s_per_token == OVERHEAD.beta_s_per_token
    scaled = corrected_cost_model(base, 0.2)
    assert scaled.beta_s_per_token == base.beta_s_per_token
    assert scaled.kv_capacity_tokens == base.kv_capacity_tokens
    assert scaled.prefill_s(300, 40) == pytest.approx(0.2 * base.prefill_s(300, 40))
    assert scaled.decode_step_s(4000) == pytest.approx(0.2 * base.decode_step_s(4000))
    assert scaled.swap_s(500) == base.swap_s(500)


def _request(rid: str, prompt: int, generated: int = 0) -> Request:
    r = Request(id=rid, level=3, arrival_s=0.0, prompt_tokens=prompt, predicted_output_tokens=50)
    r.generated_tokens = generated
    r.kv_tokens_on_device = prompt + generated - 1 if generated else 0  # all but the newest token cached
    return r


def test_a_prefill_iteration_is_predicted_as_the_sum_of_its_prefills_plus_the_overhead():
    batch = [_request("a", 120), _request("b", 40)]
    decision = Decision(stage=Stage.PREFILL, batch=batch)
    expected = OVERHEAD.prefill_s(120, 0) + OVERHEAD.prefill_s(40, 0) + OVERHEAD.iteration_overhead_s
    assert iteration_s(decision, OVERHEAD) == pytest.approx(expected)


def test_a_decode_iteration_is_predicted_as_one_step_over_the_summed_contexts_plus_the_overhead():
    batch = [_request("a", 120, generated=7), _request("b", 40, generated=30)]
    decision = Decision(stage=Stage.DECODE, batch=batch)
    expected = OVERHEAD.decode_step_s(127 + 70) + OVERHEAD.iteration_overhead_s
    assert iteration_s(decision, OVERHEAD) == pytest.approx(expected)


def test_the_scheduler_gets_a_corrected_model_only_once_the_factor_moved_more_than_5_percent():
    corrector = CostCorrector(COST)
    assert corrector.observe(0.01, 0.013) is None  # f = 1.03: within 5 % of the applied 1.0
    corrected = corrector.observe(0.01, 0.013)  # f = 1.057
    assert corrected is not None and corrector.applied_factor == pytest.approx(1.057)
    assert corrected.gamma2 == pytest.approx(COST.gamma2 * 1.057)
    assert corrector.observe(0.01, 0.0106) is None  # f = 1.0619: within 5 % of 1.057
    assert corrector.base is COST  # predictions stay with the base model: the factor is never compounded
    assert corrector.model == corrected_cost_model(COST, corrector.applied_factor)


def test_a_new_cost_model_reaches_the_scheduler_and_its_kv_allocator_at_the_next_decision_with_settings_kept():
    s = sched()
    s.update_config(s.config.with_changes(batch_size=3))
    faster = corrected_cost_model(COST, 0.5)
    s.update_config(cost=faster)
    assert s.cost is COST  # queued, like any control change
    s.schedule(0.0)
    assert s.cost is faster and s.kv.cost is faster
    assert s.config.batch_size == 3  # an administrator's change queued before is not undone


def test_a_new_cost_model_re_keys_the_waiting_calls_so_a_shorter_one_still_goes_first():
    s = sched(batch_size=1)
    s.submit(req("urgent", 1, out=100))  # holds the only slot throughout
    step(s)
    s.submit(req("long", 3, out=50))  # keyed by COST: about 1 s to go
    step(s)
    s.update_config(cost=corrected_cost_model(COST, 100.0))
    step(s)  # the new model applies: "long" is re-keyed (about 100 s)
    s.submit(req("short", 3, out=5))  # keyed by the new model: about 8 s, less than "long"'s re-keyed 100 s
    step(s)
    assert s.schedule_queue.peek().request.id == "short"
