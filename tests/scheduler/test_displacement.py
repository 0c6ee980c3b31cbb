"""Preempt-on-arrival for engines with their own batch: who gives way, and who never does."""

from scheduler.policies.displacement import (
    RunningCandidate,
    WaitingCandidate,
    displacement_victims,
    preemption_allowed,
)


def key(level: int, remaining: float = 50.0) -> tuple:
    return (level, 1, remaining)


def running(*levels: int, **kw) -> list[RunningCandidate]:
    return [RunningCandidate(f"r{i}-esi{lv}", key(lv), **kw) for i, lv in enumerate(levels)]


def test_each_waiting_request_beyond_the_free_slots_displaces_the_least_urgent_running_one():
    assert displacement_victims([key(1), key(1)], running(5, 3, 4), free_slots=0) == ["r0-esi5", "r2-esi4"]


def test_free_slots_are_used_before_anyone_is_displaced():
    assert displacement_victims([key(1)], running(5, 5), free_slots=1) == []
    assert len(displacement_victims([key(1), key(1)], running(5, 5), free_slots=1)) == 1


def test_within_a_level_nobody_is_displaced_however_short_the_newcomer():
    assert displacement_victims([key(3, 1.0)], running(3, 3), free_slots=0) == []


def test_among_equally_urgent_victims_the_cheapest_to_recompute_goes_first():
    batch = [RunningCandidate("long", key(5), computed_tokens=400), RunningCandidate("short", key(5), computed_tokens=20)]
    assert displacement_victims([key(1)], batch, free_slots=0) == ["short"]


def test_a_request_at_its_preemption_cap_keeps_its_slot():
    assert displacement_victims([key(1)], running(5, preemptible=False), free_slots=0) == []
    assert not preemption_allowed(preemptions=2, max_preemptions=2)
    assert preemption_allowed(preemptions=1, max_preemptions=2)


def test_limited_preemption_protects_a_request_past_c_times_its_predicted_length():
    assert not preemption_allowed(0, 8, generated_tokens=90, predicted_output_tokens=100, limited_c=0.8)
    assert preemption_allowed(0, 8, generated_tokens=50, predicted_output_tokens=100, limited_c=0.8)


def test_with_a_step_budget_only_as_many_are_displaced_as_the_step_can_start_computing():
    # 32 decoding ESI-5 requests take 32 of a 256-token step; each ESI-1 newcomer needs a 150-token prefill:
    # the first starts whole, the second with the 75 tokens left, a third would get none this step.
    batch = running(*[5] * 32)
    newcomers = [WaitingCandidate(key(1), step_tokens=150)] * 5
    assert len(displacement_victims(newcomers, batch, free_slots=0, step_budget=256)) == 2
    assert len(displacement_victims(newcomers, batch, free_slots=0)) == 5  # no budget given: slots alone


def test_with_a_step_budget_a_step_already_full_of_running_prefills_displaces_nobody():
    batch = [RunningCandidate(f"p{i}", key(2), step_tokens=200) for i in range(2)] + running(5, 5)
    newcomer = [WaitingCandidate(key(1), step_tokens=150)]
    assert displacement_victims(newcomer, batch, free_slots=0, step_budget=256) == []
    # a victim that is itself mid-prefill gives its share of the step back
    batch = [RunningCandidate("p", key(2), step_tokens=200), RunningCandidate("v", key(5), step_tokens=200)]
    assert displacement_victims(newcomer, batch, free_slots=0, step_budget=256) == ["v"]


def test_with_a_step_budget_newcomers_taking_free_slots_are_counted_first():
    newcomers = [WaitingCandidate(key(1), step_tokens=300), WaitingCandidate(key(1), step_tokens=150)]
    assert displacement_victims(newcomers, running(5), free_slots=1, step_budget=256) == []
    assert displacement_victims(newcomers, running(5), free_slots=1, step_budget=512) == ["r0-esi5"]
