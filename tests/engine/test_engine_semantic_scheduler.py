"""The engine executing the real semantic scheduler: urgent calls preempt, KV pressure evicts by the mode the
scheduler picks, and every output stays what greedy decoding alone would give."""

from __future__ import annotations

import itertools

import pytest

from scheduler.config import SchedulerConfig
from scheduler.cost import CostModel
from scheduler.policies import make_scheduler
from tests.engine.reference import corpus_prompts, solo_greedy

MAX_NEW = 40
# Partial keep happens when keeping the prompt pays (beta < alpha1*n + alpha2) and m* > 0 of the decoded tokens
# are worth recomputing: beta > gamma1*(n + 1) + gamma2, here for prompts under ~300 tokens (the corpus's: 167-278).
PARTIAL_COST = CostModel(alpha1=1e-6, alpha2=1e-2, gamma1=1e-6, gamma2=1e-4, beta_s_per_token=4e-4)
CHEAP_COST = CostModel(alpha1=1e-7, alpha2=1e-4, gamma1=1e-7, gamma2=1e-3, beta_s_per_token=1e-5)


def _engine(backend, cost=CHEAP_COST, **config):
    ticks = itertools.count()
    scheduler = make_scheduler(SchedulerConfig(policy="semantic", **config), cost)
    # The cost models here are chosen for the eviction mode they imply: the engine's online correction (which
    # would rescale their compute coefficients against beta) is off.
    return backend.make_engine(scheduler, max_new_tokens=MAX_NEW, clock=lambda: next(ticks) * 0.01,
                               cost_correction=False)


@pytest.fixture(scope="module")
def prompts():
    return corpus_prompts(6, stride=7)


@pytest.fixture(scope="module")
def solo(tiny_backend, prompts):
    return [solo_greedy(tiny_backend, tiny_backend.encode(p), MAX_NEW) for p in prompts]


def test_an_arriving_esi1_call_runs_at_the_next_iteration_ahead_of_running_esi5_calls(tiny_backend, prompts, solo):
    engine = _engine(tiny_backend, batch_size=3)
    for i in range(3):
        engine.add_request(f"low{i}", prompts[i], level=5, predicted_output_tokens=MAX_NEW)
    for _ in range(5):
        engine.step()
    assert sorted(engine.runner.batch_ids) == ["low0", "low1", "low2"]
    engine.add_request("urgent", prompts[3], level=1, predicted_output_tokens=MAX_NEW)
    result = engine.step()
    assert "urgent" in result.batch_ids and "urgent" in result.started_ids
    assert any(t.request_id == "urgent" and t.index == 0 for t in result.tokens)
    assert len(result.paused_ids) == 1 and result.paused_ids[0].startswith("low")
    done = engine.run_until_idle()
    assert done["urgent"].token_ids == solo[3]
    for i in range(3):
        assert done[f"low{i}"].token_ids == solo[i]


def test_the_urgent_call_finishes_before_less_urgent_calls_that_arrived_earlier(tiny_backend, prompts):
    engine = _engine(tiny_backend, batch_size=2)
    for i in range(4):
        engine.add_request(f"low{i}", prompts[i], level=4, predicted_output_tokens=MAX_NEW)
    engine.step()
    engine.add_request("urgent", prompts[4], level=1, predicted_output_tokens=MAX_NEW)
    order = []
    while engine.has_work():
        order.extend(f.request_id for f in engine.step().finished)
    assert order.index("urgent") < min(order.index(f"low{i}") for i in range(2, 4))


@pytest.mark.parametrize(
    ("eviction", "cost", "expected_mode"),
    [("swap", CHEAP_COST, "swap"), ("recompute", CHEAP_COST, "drop"), ("cost", PARTIAL_COST, "partial")],
)
def test_kv_pressure_evicts_in_the_mode_the_scheduler_chooses_and_outputs_stay_exact(
    tiny_backend, prompts, solo, eviction, cost, expected_mode
):
    # Room for about two requests' KV: urgent arrivals force the paused low-priority caches out.
    longest = max(len(tiny_backend.encode(p)) for p in prompts) + MAX_NEW
    engine = _engine(tiny_backend, batch_size=2, block_size=4, kv_capacity_blocks=(2 * longest + 16) // 4,
                     eviction=eviction, cost=cost)
    for i in range(4):
        engine.add_request(f"low{i}", prompts[i], level=5, predicted_output_tokens=MAX_NEW)
    for _ in range(12):
        engine.step()
    engine.add_request("u0", prompts[4], level=1, predicted_output_tokens=MAX_NEW)
    engine.add_request("u1", prompts[5], level=2, predicted_output_tokens=MAX_NEW)
    done = engine.run_until_idle()
    assert engine.preemptions_by_mode[expected_mode] >= 1, dict(engine.preemptions_by_mode)
    for i in range(4):
        assert done[f"low{i}"].token_ids == solo[i], f"low{i} diverged"
    assert done["u0"].token_ids == solo[4] and done["u1"].token_ids == solo[5]


def test_a_dispatcher_override_moves_a_waiting_call_ahead(tiny_backend, prompts):
    engine = _engine(tiny_backend, batch_size=1)
    engine.add_request("a", prompts[0], level=3, predicted_output_tokens=MAX_NEW)
    engine.add_request("b", prompts[1], level=4, predicted_output_tokens=MAX_NEW)
    engine.step()
    engine.reprioritise("b", 1)
    result = engine.step()
    assert result.batch_ids == ["b"]
