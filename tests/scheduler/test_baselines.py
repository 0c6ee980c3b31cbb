"""The baselines each do what their paper promises: LAPS-SD, PROSERVE SlideBatching, TRAIL."""

from scheduler.policies.laps import STABILITY_ROUNDS, acceptance_stable
from scheduler.request import Stage
from tests.scheduler.helpers import req, sched, step

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


def test_laps_acceptance_is_stable_after_gamma_rounds_whose_estimates_stay_within_delta():
    r = req("r", 3, out=200)
    for _ in range(STABILITY_ROUNDS - 1):
        r.record_draft_round(4, 4)
    assert not acceptance_stable(r)  # fewer than gamma rounds: nothing to judge yet
    r.record_draft_round(4, 4)
    assert acceptance_stable(r)  # 1.0 four times
    r.record_draft_round(4, 0)  # the estimate falls to 16/20 = 0.8: moved by more than delta
    assert not acceptance_stable(r)
    moving = req("m", 3, out=200)
    for accepted in (4, 0, 4, 0, 4, 0):  # 1.0, 0.5, 0.67, 0.5, 0.6, 0.5: never within delta over 4 rounds
        moving.record_draft_round(4, accepted)
    assert not acceptance_stable(moving)
    assert acceptance_stable(moving, rounds=2, delta=0.11)  # the paper's gamma and delta are parameters


def test_laps_perceptible_requests_run_first_shortest_estimated_time_first():
    s = sched("laps", batch_size=1)
    fresh = req("fresh", 3, out=200, predicted=200, arrival=1.0)  # nothing attained: first queue, non-perceptible
    slow = req("slow", 3, out=200, predicted=100, arrival=0.0)  # 100 tokens left at 1 token a round
    fast = req("fast", 3, out=200, predicted=300, arrival=0.0)  # 300 tokens left at 5 tokens a round
    for r, accepted in ((slow, 0), (fast, 4)):
        r.generated_tokens = r.kv_tokens_on_device = 100  # past the LAS queues' first boundary
        r.predicted_output_tokens = r.generated_tokens + r.predicted_output_tokens
        r.kv_tokens_on_device += r.prompt_tokens - 1
        for _ in range(STABILITY_ROUNDS):
            r.record_draft_round(4, accepted)
    assert s.estimated_remaining_s(fast) < s.estimated_remaining_s(slow)  # 60 rounds vs 100
    keys = {r.id: s.priority_key(r, 1.0) for r in (fresh, slow, fast)}
    assert keys["fast"] < keys["slow"] < keys["fresh"]  # perceptible first, although fresh attained least
    for r in (fresh, slow, fast):
        s.submit(r)
    assert step(s, 1.0).batch == [fast]


# --- PROSERVE SlideBatching: sliding urgent boundary, deadline-first vs density-first ------------------


def test_slide_at_light_load_every_request_is_normal_and_served_deadline_first_whatever_its_level():
    s = sched("slide", batch_size=1)
    # an ESI 5 call accepted 59 s ago (first token due at 1 s) and a fresh ESI 3 one (due at 5 s): both fit
    old5 = req("old5", 5, out=5, arrival=-59.0)
    new3 = req("new3", 3, out=5, arrival=0.0)
    s.submit(new3)
    s.submit(old5)
    assert step(s).batch == [old5]
    assert s.urgent == set()


def test_slide_a_request_the_normal_queue_cannot_carry_to_its_deadline_is_urgent():
    s = sched("slide", batch_size=1)
    # three calls due at 4.6-4.8 s, 100 tokens each (2 s at 0.02 s a step): each fits behind the others, but
    # behind them new3 (due at 5 s) would start at about 6 s
    ahead = [req(f"a{i}", 5, out=100, arrival=-55.4 + i * 0.1) for i in range(3)]
    new3 = req("new3", 3, out=5, arrival=0.0)
    assert s.judge_load([new3], 0.0) == set()  # alone it fits: the boundary slides with the load
    assert s.judge_load([*ahead, new3], 0.0) == {"new3"}


def test_slide_urgent_requests_go_first_by_descending_gain_density_not_by_deadline():
    s = sched("slide", batch_size=1)
    running = req("run5", 5, out=1000, arrival=-59.9)  # due first; holds the only slot for 20 s
    s.submit(running)
    step(s)
    long2 = req("long2", 2, out=300, arrival=0.0)  # due at 1 s, weight 8 over ~6 s: density ~1.3/s
    short3 = req("short3", 3, out=20, arrival=0.0)  # due at 5 s, weight 4 over ~0.4 s: density ~10/s
    s.submit(long2)
    s.submit(short3)
    d = step(s, 0.0)
    assert s.urgent == {"long2", "short3"}
    assert s.priority_key(short3, 0.0) < s.priority_key(long2, 0.0) < s.priority_key(running, 0.0)
    assert d.batch == [short3] and d.paused == [running]  # preemptive: urgent displaces a running normal one


def test_slide_aggressiveness_scales_the_judged_latency():
    s = sched("slide", batch_size=1)
    ahead = req("a", 5, out=100, arrival=-59.9)  # 2 s of work due before x
    x = req("x", 3, out=5, arrival=-2.0)  # due at 3 s: starts at ~2 s, fits at gamma 1
    assert s.judge_load([ahead, x], 0.0) == set()
    s.aggressiveness = 2.0  # judged at ~4 s: past its deadline
    assert s.judge_load([ahead, x], 0.0) == {"x"}


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
