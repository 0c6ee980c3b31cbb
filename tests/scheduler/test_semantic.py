import threading

from scheduler.config import SchedulerConfig
from scheduler.decision import PreemptionMode
from scheduler.policies import POLICIES, make_scheduler
from scheduler.request import Stage
from tests.scheduler.helpers import COST, req, sched, step


def test_an_urgent_arrival_displaces_less_urgent_running_work_at_the_next_iteration():
    s = sched(batch_size=2)
    low1, low2 = req("l1", 5, out=50), req("l2", 4, out=50)
    s.submit(low1)
    s.submit(low2)
    step(s)
    step(s)
    urgent = req("u", 1, out=50, arrival=0.05)
    s.submit(urgent)
    d = step(s, 0.05)
    assert urgent in d.batch and low2 in d.batch and low1 not in d.batch
    assert d.paused == [low1] and low1.stage is Stage.WAITING and low1.preemptions == 1
    assert low1.kv_tokens_on_device > 0  # paused, its cache stays resident


def test_without_preempt_on_arrival_running_work_keeps_its_slot():
    s = sched(batch_size=1, preempt_on_arrival=False)
    low = req("l", 5, out=50)
    s.submit(low)
    step(s)
    s.submit(req("u", 1, out=50))
    assert step(s).batch == [low]


def test_without_preemption_within_a_level_only_a_more_urgent_arrival_displaces_running_work():
    for within in (True, False):
        s = sched(batch_size=1, preempt_within_level=within)
        long = req("long", 2, out=400)
        s.submit(long)
        step(s)
        step(s)
        shorter = req("short", 2, out=5, arrival=0.01)
        s.submit(shorter)
        assert step(s, 0.01).batch == ([shorter] if within else [long]), within
        urgent = req("urgent", 1, out=50, arrival=0.02)
        s.submit(urgent)
        assert step(s, 0.02).batch == [urgent], within


def test_shorter_predicted_remaining_time_goes_first_within_a_level():
    s = sched(batch_size=1)
    long, short = req("long", 2, out=400), req("short", 2, out=20)
    s.submit(long)
    s.submit(short)
    assert step(s).batch == [short]


def test_a_less_urgent_prefill_waits_while_the_most_urgent_request_decodes():
    for merge in ("paper", "level"):
        s = sched(batch_size=3, stage_merge=merge, lower_prefill_share=0.0)
        top = req("top", 1, out=50)
        s.submit(top)
        step(s)
        lower = req("lower", 3, out=5)
        s.submit(lower)
        d = step(s)
        assert d.stage is Stage.DECODE and d.batch == [top], merge
        same = req("same", 1, out=400)  # same level as p*, longer: joins only in "level" mode
        s.submit(same)
        d = step(s)
        assert (same in d.batch) == (merge == "level"), merge
        assert lower not in d.batch


def test_an_urgent_prefill_merges_everything_into_one_prefill_iteration():
    s = sched(batch_size=3)
    a, b = req("a", 3, out=50), req("b", 4, out=50)
    s.submit(a)
    s.submit(b)
    step(s)
    u = req("u", 1, out=50)
    s.submit(u)
    d = step(s)
    assert d.stage is Stage.PREFILL and set(d.batch) == {a, b, u}


def test_eviction_pops_least_urgent_victims_and_applies_the_cache_or_recompute_rule():
    # capacity 20 blocks of 4 tokens; the ESI-5 request holds most of it, then two urgent ones arrive
    s = sched(batch_size=1, kv_capacity_blocks=20)
    low = req("low", 5, prompt=60, out=100)
    s.submit(low)
    step(s)
    step(s)
    s.submit(req("u", 1, prompt=60, out=10))
    d = step(s)
    assert d.batch[0].id == "u" and [p.request.id for p in d.preemptions] == ["low"]
    p = d.preemptions[0]
    # prompt of 60: beta 1e-4 < alpha1*60 + alpha2 = 1.06e-4 -> keep the prompt; m* = 0 -> drop decoded
    assert p.mode is PreemptionMode.PARTIAL and p.kept_tokens == 60
    assert low.stage is Stage.PREEMPTED_SWAPPED and low.kv_tokens_on_host == 60 and low.kv_tokens_on_device == 0
    assert s.memory.used_blocks <= 20


def test_eviction_mode_recompute_always_drops_and_swap_always_keeps():
    for mode, expected in (("recompute", PreemptionMode.DROP), ("swap", PreemptionMode.SWAP)):
        s = sched(batch_size=1, kv_capacity_blocks=20, eviction=mode)
        s.submit(req("low", 5, prompt=60, out=100))
        step(s)
        step(s)
        s.submit(req("u", 1, prompt=60, out=10))
        assert step(s).preemptions[0].mode is expected


def test_a_request_past_c_times_its_predicted_length_is_not_preempted():
    s = sched(batch_size=1, limited_preemption_c=0.5)
    low = req("low", 5, out=10)
    s.submit(low)
    for _ in range(5):
        step(s)
    s.submit(req("u", 1, out=10))
    assert step(s).batch == [low]


def test_the_per_request_preemption_cap_makes_a_request_non_preemptible():
    config = SchedulerConfig(batch_size=1, kv_capacity_blocks=1000, block_size=4).with_tier_changes(max_preemptions=1)
    s = make_scheduler(config, COST)
    low = req("low", 5, out=100)
    s.submit(low)
    step(s)
    s.submit(req("u1", 1, out=2))
    step(s)
    assert low.preemptions == 1
    step(s)  # u1 finishes
    assert step(s).batch == [low]  # low resumes
    s.submit(req("u2", 1, out=2))
    assert step(s).batch == [low]


def test_reserved_kv_fraction_keeps_blocks_free_for_its_tier():
    config = SchedulerConfig(batch_size=4, kv_capacity_blocks=40, block_size=4)
    tiers = dict(config.tiers)
    from dataclasses import replace
    tiers["Immediate"] = replace(tiers["Immediate"], reserved_kv_fraction=0.5)
    s = make_scheduler(config.with_changes(tiers=tiers), COST)
    lows = [req(f"l{i}", 5, prompt=40, out=50) for i in range(4)]
    for r in lows:
        s.submit(r)
    d = step(s)
    assert len(d.batch) == 2  # 2 x 11 blocks > 20 unreserved: only two fit
    assert s.memory.used_blocks <= 20


def test_cancel_removes_a_waiting_or_running_request_and_reports_it():
    s = sched(batch_size=1)
    run, wait = req("run", 3, out=50), req("wait", 4, out=50)
    s.submit(run)
    s.submit(wait)
    step(s)
    s.cancel("run")
    s.cancel("wait")
    d = s.schedule(1.0)
    assert set(d.cancelled) == {run, wait} and d.is_idle
    assert run.stage is Stage.CANCELLED and wait.stage is Stage.CANCELLED
    assert not s.has_work() and s.memory.used_blocks == 0


def test_reprioritise_moves_a_waiting_request_ahead_at_the_next_decision():
    s = sched(batch_size=1)
    a, b = req("a", 3, out=5), req("b", 4, out=5)
    s.submit(a)
    s.submit(b)
    s.reprioritise("b", 1)
    assert s.schedule(0.0).batch == [b] and b.level == 1


def test_update_config_applies_a_new_batch_size_at_the_next_decision():
    s = sched(batch_size=1)
    for i in range(4):
        s.submit(req(str(i), 3, out=50))
    assert len(step(s).batch) == 1
    s.update_config(s.config.with_changes(batch_size=3))
    assert len(step(s).batch) == 3


def test_submit_from_other_threads_loses_nothing():
    s = sched(batch_size=64)

    def produce(k: int) -> None:
        for i in range(500):
            s.submit(req(f"{k}-{i}", 1 + i % 5, out=1))

    threads = [threading.Thread(target=produce, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        step(s)
    for t in threads:
        t.join()
    while s.has_work():
        step(s)
    assert s.waiting_count() == 0 and not s.requests


def test_with_aging_an_esi5_request_gains_levels_but_never_overtakes_esi1():
    config = SchedulerConfig(batch_size=1, kv_capacity_blocks=1000, block_size=4).with_tier_changes(aging_step_s=10.0)
    s = make_scheduler(config, COST)
    old5 = req("old5", 5, out=5, arrival=0.0)
    fresh2 = req("fresh2", 2, out=5, arrival=100.0)
    fresh1 = req("fresh1", 1, out=400, arrival=100.0)
    for r in (old5, fresh2, fresh1):
        s.submit(r)
    assert s.effective_level(old5, 100.0) == 2
    order = []
    now = 100.0
    while s.has_work():
        d = step(s, now)
        now += 1.0
        if d.batch and (not order or order[-1] != d.batch[0].id):
            order.append(d.batch[0].id)
    assert order == ["fresh1", "old5", "fresh2"]


def test_without_aging_an_old_esi5_request_stays_behind_fresh_esi2():
    s = sched(batch_size=1)
    old5, fresh2 = req("old5", 5, out=5, arrival=0.0), req("fresh2", 2, out=5, arrival=100.0)
    s.submit(old5)
    s.submit(fresh2)
    assert step(s, 100.0).batch == [fresh2]


def test_every_policy_runs_the_same_interface_to_completion():
    for name in POLICIES:
        s = sched(name, batch_size=3)
        rs = [req(str(i), 1 + i % 5, out=1 + i % 7, arrival=0.0) for i in range(12)]
        for r in rs:
            s.submit(r)
        for _ in range(200):
            if not s.has_work():
                break
            step(s)
        assert all(r.stage is Stage.DONE for r in rs), name
