"""Invariants over random workloads, driven through the simulator's executor loop."""

import json
import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.config import SchedulerConfig
from scheduler.drafting import DraftProfile
from scheduler.policies import POLICIES, make_scheduler
from scheduler.policies.stage_merge import decode_ready
from scheduler.request import Request, Stage
from scheduler.simulator import drive
from tests.scheduler.helpers import COST

workloads = st.lists(
    st.tuples(st.integers(0, 20), st.integers(1, 5), st.integers(1, 60), st.integers(1, 40)),
    min_size=1, max_size=30,
)
SETTINGS = settings(max_examples=50, deadline=None)


def build(rows, *, exact=True) -> list[Request]:
    rows = sorted(rows, key=lambda x: x[0])
    return [
        Request(id=str(i), level=lvl, arrival_s=t * 0.05, prompt_tokens=p,
                predicted_output_tokens=o if exact else max(1, o // 10 * 10), true_output_tokens=o)
        for i, (t, lvl, p, o) in enumerate(rows)
    ]


@SETTINGS
@given(workloads)
def test_with_batch_1_no_request_runs_while_a_strictly_more_urgent_one_waits(rows):
    s = make_scheduler(SchedulerConfig(batch_size=1, kv_capacity_blocks=200, block_size=4, aging_enabled=False), COST)
    requests = build(rows)

    def observe(now, decision, sch):
        if decision.batch:
            waiting = [r for r in sch.requests.values() if r not in decision.batch]
            assert all(decision.batch[0].level <= r.level for r in waiting)

    drive(s, requests, COST, observer=observe)


@SETTINGS
@given(workloads)
def test_no_request_completes_after_a_less_urgent_one_that_arrived_before_its_last_iteration(rows):
    """The paper's constraint (eq. 2), for batch 1 with perfect predictions and aging off."""
    s = make_scheduler(SchedulerConfig(batch_size=1, kv_capacity_blocks=200, block_size=4, aging_enabled=False), COST)
    requests = build(rows)
    last_start: dict[str, float] = {}

    def observe(now, decision, sch):
        for r in decision.batch:
            last_start[r.id] = now

    drive(s, requests, COST, observer=observe)
    for x in requests:
        for y in requests:
            if x.level < y.level and x.arrival_s <= last_start[y.id]:
                assert x.finish_s <= y.finish_s


@SETTINGS
@given(workloads, st.sampled_from(sorted(POLICIES)), st.integers(1, 6), st.integers(26, 60),
       st.sampled_from(["cost", "recompute", "swap"]), st.sets(st.integers(0, 29), max_size=5),
       st.sampled_from([None, DraftProfile(3, 0.5, 1.0, seed=1)]))
def test_every_request_ends_done_or_cancelled_exactly_once_and_kv_stays_within_capacity(
        rows, policy, batch, capacity, eviction, cancels, drafting):
    s = make_scheduler(SchedulerConfig(policy=policy, batch_size=batch, kv_capacity_blocks=capacity, block_size=4,
                                       eviction=eviction), COST)
    requests = build(rows, exact=False)
    if drafting is not None:  # speculative decoding: several tokens a step
        drafting.assign(requests)
    cancel_ids = {str(i) for i in cancels if i < len(requests)}
    seen_steps = [0]

    def observe(now, decision, sch):
        seen_steps[0] += 1
        if seen_steps[0] == 3:
            for rid in cancel_ids:
                sch.cancel(rid)
        assert sch.memory.used_blocks <= capacity
        batch_ids = {r.id for r in decision.batch}
        assert len(batch_ids) == len(decision.batch) <= batch
        live = {r.id for r in sch.schedule_queue.waiting()}
        assert not (live & batch_ids)  # nothing both queued and running
        assert live | batch_ids == set(sch.requests)  # nothing lost between heap and batch
        for r in decision.batch:
            assert r.stage in (Stage.PREFILL, Stage.DECODE)
            assert (decision.stage is Stage.DECODE) <= decode_ready(r)
        for rid in live:
            assert sch.requests[rid].stage in (Stage.WAITING, Stage.PREEMPTED_SWAPPED, Stage.PREEMPTED_DROPPED)
        assert sch.eviction_heap.ids() <= {rid for rid in live if sch.requests[rid].kv_tokens_on_device}

    done, *_ = drive(s, requests, COST, observer=observe, drafting=drafting)
    assert sorted(r.id for r in done) == sorted(r.id for r in requests)  # each exactly once
    for r in requests:
        assert r.stage in (Stage.DONE, Stage.CANCELLED)
        if r.stage is Stage.DONE:
            assert r.generated_tokens == r.true_output_tokens
    assert s.memory.used_blocks == 0 and not s.has_work()


def test_the_same_seed_prints_byte_identical_json():
    cmd = [sys.executable, "-m", "scheduler.simulate", "--policy", "semantic,fcfs", "--concurrency", "10",
           "--slots", "5", "--seed", "7", "--json", "--kv-blocks", "120", "--no-progress"]
    first = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    second = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    assert first == second
    out = json.loads(first)
    assert [r["policy"] for r in out] == ["semantic", "fcfs"]
    assert set(out[0]["by_esi"]) == {"1", "2", "3", "4", "5"}
    for key in ("count", "wait_mean", "wait_p50", "wait_p90", "wait_p99", "normalized_wait_mean", "ttft_p50",
                "ttft_p99", "e2e_p99"):
        assert key in out[0]["overall"]


def test_drafting_emits_the_same_tokens_in_fewer_iterations_and_reports_acceptance_per_request():
    def run(drafting):
        s = make_scheduler(SchedulerConfig(policy="fcfs", batch_size=4, kv_capacity_blocks=1000, block_size=4), COST)
        requests = build([(0, 3, 10, 40), (1, 2, 12, 25), (2, 5, 8, 33)])
        if drafting is not None:
            drafting.assign(requests)
        tokens = {}
        done, clock, iterations, generated = drive(
            s, requests, COST, drafting=drafting, on_token=lambda r, i, t: tokens.setdefault(r.id, []).append(i))
        return requests, iterations, generated, tokens

    plain, plain_iterations, plain_generated, plain_tokens = run(None)
    always, iterations, generated, tokens = run(DraftProfile(4, 1.0, 1.0))
    assert generated == plain_generated == 40 + 25 + 33
    assert tokens == plain_tokens  # every index 1..n once, in order
    assert iterations < plain_iterations / 2  # 5 tokens a decode step (the prefills emit one)
    assert all(r.accepted_tokens == r.drafted_tokens > 0 for r in always)
    never, _, generated, _ = run(DraftProfile(4, 0.0, 0.0))
    assert generated == plain_generated and all(r.accepted_tokens == 0 < r.drafted_tokens for r in never)


def test_beta_overrides_the_profiles_swap_cost_and_a_slow_host_link_turns_the_cost_rule_to_recompute():
    def run(*extra: str) -> dict:
        cmd = [sys.executable, "-m", "scheduler.simulate", "--policy", "semantic", "--concurrency", "20",
               "--slots", "5", "--kv-blocks", "60", "--json", "--no-progress", *extra]
        return json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)

    preset, slow = run(), run("--beta", "0.02")
    assert slow["config"]["profile"] == "a100-4b, beta 0.02"
    assert preset["swapped_tokens"] > 0 and preset["recomputed_tokens"] == 0  # beta 1e-4 < alpha2: keep it all
    assert slow["swapped_tokens"] == 0 and slow["recomputed_tokens"] > 0  # 0.02 s a token: recompute instead
