import threading

from scheduler.config import SchedulerConfig
from scheduler.cost import CostModel
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
    # prompt of 60: beta 1e-4 < alpha1*60 + alpha2 = 1.06e-4 -> keep the prompt; m* = 0 -> keep the decoded too
    assert p.mode is PreemptionMode.SWAP and p.kept_tokens == 61
    assert low.stage is Stage.PREEMPTED_SWAPPED and low.kv_tokens_on_host == 61 and low.kv_tokens_on_device == 0
    assert s.memory.used_blocks <= 20


def test_partial_keep_recomputes_m_star_decoded_tokens_where_a_token_costs_more_to_keep_than_to_decode():
    # beta 2e-3 > gamma1*(n + 1) + gamma2 = 1.061e-3: m* = (2e-3 - 1e-5*60 - (1e-5 + 2e-4)/2) / 1e-5 = 129.5
    # decoded tokens to recompute; the prompt is kept (beta < alpha1*60 + alpha2 = 3.6e-3)
    slow_host = CostModel(alpha1=1e-5, alpha2=3e-3, gamma1=1e-5, gamma2=1e-4, beta_s_per_token=2e-3)
    s = make_scheduler(SchedulerConfig(policy="semantic", batch_size=1, kv_capacity_blocks=100, block_size=4),
                       slow_host)
    low = req("low", 5, prompt=60, out=400)
    s.submit(low)
    for _ in range(200):  # 199 decoded tokens with KV
        step(s)
    s.submit(req("u", 1, prompt=260, out=10))
    p = step(s).preemptions[0]
    assert p.mode is PreemptionMode.PARTIAL and p.kept_tokens == 60 + 199 - 130


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


def _urgent_arrival_short_of_memory_beside(low_cap: int):
    """capacity 20 blocks of 4 tokens; an ESI-5 request decodes in a batch of 2 and holds 17 of them, then an
    ESI-1 request whose prompt needs 10 arrives: nothing waits to be evicted, only the running ESI-5 could go."""
    config = SchedulerConfig(batch_size=2, kv_capacity_blocks=20, block_size=4).with_tier_changes(
        max_preemptions=low_cap)
    s = make_scheduler(config, COST)
    low = req("low", 5, prompt=60, out=100)
    s.submit(low)
    for _ in range(5):
        step(s)
    s.submit(req("u", 1, prompt=40, out=10))
    return s, low, step(s)


def test_memory_pressure_displaces_a_preemptible_running_request_for_an_urgent_one():
    s, low, d = _urgent_arrival_short_of_memory_beside(low_cap=8)
    assert [r.id for r in d.batch] == ["u"] and [p.request.id for p in d.preemptions] == ["low"]
    assert low.preemptions == 1 and s.memory.used_blocks <= 20


def test_memory_pressure_never_displaces_a_protected_running_request():
    """At its tier's preemption cap a request is protected from memory pressure too: the urgent one waits."""
    s, low, d = _urgent_arrival_short_of_memory_beside(low_cap=0)
    assert d.batch == [low] and not d.preemptions and not d.paused
    assert low.preemptions == 0 and s.memory.used_blocks <= 20


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


def test_reprioritise_gives_the_request_the_new_levels_tier_unless_one_is_named():
    s = sched(batch_size=1)
    a = req("a", 1, out=5, tier="Immediate")
    s.submit(a)
    s.reprioritise("a", 4)
    s.schedule(0.0)
    assert a.tier is None and s.tier(a).name == "Less urgent"  # its aging, reservation and cap follow
    s.reprioritise("a", 2, "Immediate")
    s.schedule(0.0)
    assert (a.level, a.tier, s.tier(a).name) == (2, "Immediate", "Immediate")


def test_reprioritise_re_ranks_a_paused_request_in_the_eviction_order():
    """Two paused requests keep KV on device; the one raised to ESI 1 must no longer be the first victim."""
    s = sched(batch_size=2)
    low, mid = req("low", 5, out=50), req("mid", 4, out=50)
    s.submit(low)
    s.submit(mid)
    step(s)
    s.submit(req("u1", 1, out=50))
    s.submit(req("u2", 1, out=50))
    step(s)  # both paused, both resident
    assert s.eviction_heap.ids() == {"low", "mid"}
    s.reprioritise("low", 2)
    s.schedule(1.0)
    assert s.eviction_heap.pop().id == "mid"


def test_a_new_block_size_re_expresses_every_holding_without_losing_tokens():
    s = sched(batch_size=2, kv_capacity_blocks=100, block_size=4)
    a, b = req("a", 3, prompt=10, out=50), req("b", 3, prompt=30, out=50)
    s.submit(a)
    s.submit(b)
    step(s)
    assert s.memory.used_blocks == 3 + 8  # ceil(10/4) + ceil(30/4)
    s.update_config(s.config.with_changes(block_size=8))
    step(s)
    assert s.memory.block_size == 8
    assert s.memory.used_blocks == 2 + 4  # ceil(11/8) + ceil(31/8): every context token still has a block


def test_update_config_applies_a_new_batch_size_at_the_next_decision():
    s = sched(batch_size=1)
    for i in range(4):
        s.submit(req(str(i), 3, out=50))
    assert len(step(s).batch) == 1
    s.update_config(s.config.with_changes(batch_size=3))
    assert len(step(s).batch) == 3


def test_a_hand_over_to_another_policy_keeps_every_request_and_its_kv_accounting():
    s = sched(batch_size=2)
    requests = [req(f"r{i}", 1 + i % 5, prompt=12, out=6 + i) for i in range(5)]
    for r in requests:
        s.submit(r)
    step(s)
    step(s)
    late = req("late", 1, out=4)
    s.submit(late)
    step(s)  # the ESI-1 arrival pauses a running request: waiting, paused and running requests all exist
    s.submit(req("queued", 2, out=3))  # still in the arrival buffer at the hand-over
    used = s.memory.used_blocks
    fcfs = make_scheduler(s.config.with_changes(policy="fcfs"), COST)
    s.hand_over(fcfs, now_s=1.0)
    assert fcfs.memory.used_blocks == used and set(fcfs.eviction_heap.ids()) <= set(fcfs.requests)
    s.submit(req("racing", 5, out=2))  # a submit through the old object after the hand-over still arrives
    done = []
    for _ in range(200):
        if not fcfs.has_work():
            break
        d = step(fcfs, 1.0)
        done += [r.id for r in d.batch if r.stage is Stage.DONE]
    assert sorted(done) == sorted([r.id for r in requests] + ["late", "queued", "racing"])
    assert fcfs.memory.used_blocks == 0 and fcfs.preemptions >= 1


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
