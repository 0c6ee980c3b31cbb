"""The engine's online correction of its cost model (scheduler/cost_correction.py) on the tiny model: measured
iteration times pull a preset that is far off for this machine toward them, the scheduler and its KV allocator get
the corrected model, a policy change corrects the base model (never the corrected one again), and what the calls
say does not change."""

from __future__ import annotations

import pytest

from scheduler.config import SchedulerConfig
from scheduler.cost import PRESETS
from scheduler.cost_correction import (
    APPLY_THRESHOLD,
    MIN_PREDICTED_S,
    RATIO_MAX,
    RATIO_MIN,
    corrected_cost_model,
)
from scheduler.policies import make_scheduler
from tests.engine.reference import SOLO_MAX_NEW

# Qwen1.5-4B on an A100, made 100 times slower: a decode step of 1.2 s, far slower than the tiny model takes on any
# machine, however loaded (on a quiet CPU the plain preset is already 5 times too slow, but a CPU shared with
# another test process can make the tiny model's step 20 times slower than the preset's: too close to call).
BASE = corrected_cost_model(PRESETS["a100-4b"], 100.0)


def _engine(backend, **kwargs):
    scheduler = make_scheduler(SchedulerConfig(policy="semantic", batch_size=8), BASE)
    return backend.make_engine(scheduler, max_new_tokens=SOLO_MAX_NEW, **kwargs)


def _generate(engine, backend, prompts, first: int = 0) -> list[list[int]]:
    for i, prompt in enumerate(prompts, start=first):
        engine.add_request(f"r{i}", backend.encode(prompt), level=3, predicted_output_tokens=SOLO_MAX_NEW)
    done = engine.run_until_idle()
    return [list(done[f"r{i}"].token_ids) for i in range(first, first + len(prompts))]


def _record_ratios(engine) -> list[float]:
    """measured / predicted of every iteration the correction takes, as the engine hands them over."""
    ratios: list[float] = []
    observe = engine.cost_corrector.observe

    def spy(predicted_s: float, measured_s: float):
        if predicted_s >= MIN_PREDICTED_S:
            ratios.append(measured_s / predicted_s)
        return observe(predicted_s, measured_s)

    engine.cost_corrector.observe = spy
    return ratios


def test_measured_iterations_correct_a_preset_far_off_for_this_machine_and_outputs_stay_greedy(
    tiny_backend, prompts, solo
):
    engine = _engine(tiny_backend)
    ratios = _record_ratios(engine)
    assert _generate(engine, tiny_backend, prompts) == [list(s) for s in solo]
    corrector = engine.cost_corrector
    expected = 1.0
    for ratio in ratios:  # the momentum rule over what was measured, clipped
        expected = 0.9 * expected + 0.1 * min(max(ratio, RATIO_MIN), RATIO_MAX)
    assert len(ratios) >= 30 and corrector.factor == pytest.approx(expected)
    assert corrector.factor < 1 / 1.5, corrector.factor  # well away from 1, toward what this machine takes
    # The scheduler (and its allocator) has the base model times a factor within 5 % of the current one.
    assert corrector.base is BASE
    assert abs(corrector.factor - corrector.applied_factor) <= APPLY_THRESHOLD * corrector.applied_factor
    assert engine.scheduler.cost == corrected_cost_model(BASE, corrector.applied_factor)
    assert engine.scheduler.kv.cost is engine.scheduler.cost
    assert engine.scheduler.cost.gamma2 != BASE.gamma2 and engine.scheduler.cost.beta_s_per_token == BASE.beta_s_per_token


def test_a_policy_change_corrects_the_base_model_not_the_corrected_one(tiny_backend, prompts, solo):
    engine = _engine(tiny_backend)
    assert _generate(engine, tiny_backend, prompts[:3]) == [list(s) for s in solo[:3]]
    engine.reconfigure(engine.current_config().with_changes(policy="fcfs"))
    engine.step()  # the successor applies what it was handed
    assert engine.scheduler.name == "fcfs"
    assert engine.scheduler.cost == corrected_cost_model(BASE, engine.cost_corrector.applied_factor)
    assert _generate(engine, tiny_backend, prompts[3:], first=3) == [list(s) for s in solo[3:]]
    assert engine.cost_corrector.base is BASE
    assert engine.scheduler.cost == corrected_cost_model(BASE, engine.cost_corrector.applied_factor)


def test_with_the_correction_off_the_scheduler_keeps_the_model_it_was_given(tiny_backend, prompts, solo):
    engine = _engine(tiny_backend, cost_correction=False)
    assert engine.cost_corrector is None
    assert _generate(engine, tiny_backend, prompts[:2]) == [list(s) for s in solo[:2]]
    assert engine.scheduler.cost is BASE
