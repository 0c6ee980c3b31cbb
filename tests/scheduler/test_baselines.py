"""The baselines each do what their paper promises: LAPS-SD, PROSERVE SlideBatching, TRAIL."""

import pytest

from scheduler.policies.laps import PERCEPTIBLE_AFTER_TOKENS
from scheduler.policies.slide import URGENT_BUDGET_ITERATIONS
from scheduler.request import Stage
from tests.scheduler.helpers import COST, req, sched, step

# --- LAPS-SD: least attained service, perceptible / non-perceptible ------------------------------------


def test_laps_serves_least_attained_service_first_and_a_fresh_arrival_displaces_a_served_request():
    s = sched("laps", batch_size=1)
    old = req("old", 1, out=200)
    s.submit(old)
    for _ in range(20):  # old has attained 20 tokens: out of the first queue
        step(s)
    fresh = req("fresh", 5, out=200, arrival=1.0)
    s.submit(fresh)
    d = step(s, 1.0)
    assert d.batch == [fresh] and d.paused == [old]  # preemptive, and urgency-blind (ESI 5 beats ESI 1)


def test_laps_non_perceptible_requests_are_served_in_arrival_order_whatever_their_predicted_length():
    s = sched("laps", batch_size=1)
    first_long = req("long", 3, out=400, arrival=0.0)
    second_short = req("short", 3, out=5, arrival=0.1)
    s.submit(first_long)
    s.submit(second_short)
    assert step(s, 0.1).batch == [first_long]  # no length trusted before PERCEPTIBLE_AFTER_TOKENS


def test_laps_perceptible_requests_go_shortest_predicted_remaining_first_within_their_queue():
    s = sched("laps", batch_size=2)
    a = req("a", 3, out=60, predicted=200, arrival=0.0)
    b = req("b", 3, out=60, predicted=40, arrival=0.1)
    s.submit(a)
    s.submit(b)
    for _ in range(PERCEPTIBLE_AFTER_TOKENS):
        step(s, 0.1)
    assert a.generated_tokens == b.generated_tokens == PERCEPTIBLE_AFTER_TOKENS
    # both perceptible now, same attained-service queue: the shorter predicted remainder ranks first
    assert s.priority_key(b, 1.0) < s.priority_key(a, 1.0)
    assert s.priority_key(a, 1.0)[1] == 1  # the perceptible state
    s.update_config(s.config.with_changes(batch_size=1))
    assert step(s, 1.0).batch == [b]


# --- PROSERVE SlideBatching: sliding urgent boundary, deadline-first vs density-first ------------------


def test_slide_boundary_is_the_latency_budget_of_the_batch_from_the_cost_model():
    small, big = sched("slide", batch_size=2), sched("slide", batch_size=64)
    assert small.boundary_s() == pytest.approx(URGENT_BUDGET_ITERATIONS * COST.decode_step_s(2 * 512))
    assert big.boundary_s() > small.boundary_s()  # a bigger batch: slower iterations, earlier urgency


def test_slide_normal_requests_go_density_first_tier_weight_per_remaining_second():
    s = sched("slide", batch_size=1)
    # ESI 5 (weight 1), short; ESI 4 (weight 2), 4x longer: density favours the short ESI 5 request
    short5 = req("short5", 5, out=20)
    long4 = req("long4", 4, out=80)
    s.submit(long4)
    s.submit(short5)
    assert s.priority_key(short5, 0.0)[0] == s.priority_key(long4, 0.0)[0] == 1  # both normal
    assert step(s).batch == [short5]


def test_slide_a_request_past_the_sliding_boundary_is_urgent_and_served_deadline_first():
    s = sched("slide", batch_size=1)
    boundary = s.boundary_s()
    # first tokens due at arrival + TTFT target (ESI 1: 0.5 s, ESI 2: 1 s); at t = 0 both are inside the
    # boundary, the ESI 2 one due first; an ESI 5 request (due in 60 s) is normal however dense it is
    esi1 = req("esi1", 1, out=300, arrival=0.5 * boundary - 0.5)
    esi2 = req("esi2", 2, out=300, arrival=0.2 * boundary - 1.0)
    dense = req("dense5", 5, out=2, arrival=0.0)
    for r in (dense, esi1, esi2):
        s.submit(r)
    keys = {r.id: s.priority_key(r, 0.0) for r in (esi1, esi2, dense)}
    assert keys["esi1"][0] == keys["esi2"][0] == 0 and keys["dense5"][0] == 1
    assert keys["esi2"] < keys["esi1"] < keys["dense5"]  # deadline-first, not level-first, then normal
    assert step(s).batch == [esi2]


def test_slide_a_waiting_request_slides_into_the_urgent_class_when_its_slack_reaches_the_boundary():
    s = sched("slide", batch_size=1)
    boundary = s.boundary_s()
    running4 = req("r4", 4, out=1000)  # ESI 4 (weight 2): denser than the ESI 5 one, runs first
    waiting5 = req("w5", 5, out=1000)  # first token due at 60 s
    s.submit(running4)
    s.submit(waiting5)
    for _ in range(400):  # r4's next token is due at 30 s + 400 x 0.1 s = 70 s: not urgent before ~69.6 s
        assert step(s, 0.0).batch == [running4]
    t_urgent = s.next_rekey_s(waiting5, 0.0)
    assert t_urgent == pytest.approx(60.0 - boundary)
    assert step(s, t_urgent - 1.0).batch == [running4]  # still normal, still less dense
    d = step(s, t_urgent + 1e-6)  # the rekey event fires: w5 slid past the boundary, deadline-first wins
    assert d.batch == [waiting5] and d.paused == [running4]


def test_slide_an_urgent_request_displaces_a_running_normal_one():
    s = sched("slide", batch_size=1)
    normal = req("n", 5, out=400, arrival=0.0)
    s.submit(normal)
    step(s, 0.0)
    urgent = req("u", 1, out=400, arrival=0.1)  # due at 0.6 s: inside the boundary on arrival
    s.submit(urgent)
    d = step(s, 0.1)
    assert d.batch == [urgent] and d.paused == [normal]


# --- TRAIL: shortest predicted remaining processing time with limited preemption -----------------------


def test_trail_runs_shortest_predicted_remaining_first_and_is_urgency_blind():
    s = sched("trail", batch_size=1)
    long1, short5 = req("long1", 1, out=300), req("short5", 5, out=20)
    s.submit(long1)
    s.submit(short5)
    assert step(s).batch == [short5]


def test_trail_preempts_a_running_request_early_in_its_life_for_a_shorter_one():
    s = sched("trail", batch_size=1)
    long = req("long", 3, out=100)
    s.submit(long)
    for _ in range(10):  # 10 < 0.8 x 100: still preemptible
        step(s)
    short = req("short", 3, out=10)
    s.submit(short)
    d = step(s)
    assert d.batch == [short] and d.paused == [long]


def test_trail_limited_preemption_protects_a_request_past_c_times_its_predicted_length():
    s = sched("trail", batch_size=1)
    assert s.limited_preemption_c == 0.8  # TRAIL's best C is the default
    long = req("long", 3, out=100)
    s.submit(long)
    for _ in range(80):  # 80 >= 0.8 x 100
        step(s)
    short = req("short", 3, out=2)
    s.submit(short)
    assert step(s).batch == [long]  # not displaced, although short's remainder (2) < long's (20)
    s2 = sched("trail", batch_size=1, limited_preemption_c=0.9)
    long2 = req("long", 3, out=100)
    s2.submit(long2)
    for _ in range(80):
        step(s2)
    s2.submit(req("short", 3, out=2))
    assert step(s2).batch[0].id == "short"  # with C = 0.9, 80 tokens is still preemptible


def test_trail_uses_the_refined_remaining_length_from_the_probe():
    s = sched("trail", batch_size=1)
    a, b = req("a", 3, out=50, predicted=50), req("b", 3, out=50, predicted=60)
    s.submit(a)
    s.submit(b)
    assert step(s).batch == [a]
    s.refine_remaining("b", 3)  # the layer-embedding probe says b is nearly done
    d = step(s)
    assert d.batch == [b] and a.stage is Stage.WAITING
