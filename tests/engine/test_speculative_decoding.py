"""Speculative decoding (prompt lookup and the read-out's forced tokens) changes how many forward passes a
request takes, never what it says: greedy output token for token, alone, batched, constrained and preempted."""

from __future__ import annotations

import pytest

from inference.guidance.read_out import ReadOutConstraint
from inference.speculation import NgramIndex, draft
from judgment.protocols import load_library
from scheduler.config import SchedulerConfig
from scheduler.cost import PRESETS
from scheduler.decision import PreemptionMode
from scheduler.policies import make_scheduler
from tests.engine.reference import SOLO_MAX_NEW
from tools.gpu_bench.scripted import ScriptedScheduler
from training.guidance_corpus import example_records, record_plan, record_prompt

MAX_NEW = SOLO_MAX_NEW


def test_prompt_lookup_proposes_what_followed_the_latest_earlier_occurrence_of_the_longest_tail():
    index = NgramIndex()
    #              0  1  2  3  4  5  6  7  8  9
    token_ids = [5, 6, 7, 8, 9, 1, 6, 7, 2, 6, 7]
    assert index.propose(token_ids, 3) == [2, 6, 7]  # "6 7" last occurred at 6..7, then 2 6 7
    token_ids += [8]
    assert index.propose(token_ids, 2) == [9, 1]  # "6 7 8" matches at 1..3 (the longest tail wins over "8")
    assert NgramIndex().propose([1, 2, 3], 4) == []  # nothing repeats


def test_a_read_out_drafts_every_forced_token_and_stops_where_the_model_must_choose():
    constraint = ReadOutConstraint([[10, 11, 12], [20, 21]], eos_token_id=0)
    constraint.advance(10)  # inside the first sentence: 11 and 12 are forced, then a choice (20 or EOS)
    proposal = draft([99, 10], NgramIndex(), 8, constraint)
    assert proposal.token_ids == (11, 12)
    assert proposal.allowed_after == ([12], [0, 20])
    assert constraint.allowed() == [11]  # the draft walked a copy


def test_the_draft_is_held_to_the_room_left():
    constraint = ReadOutConstraint([[10, 11, 12, 13]], eos_token_id=0)
    constraint.advance(10)
    assert draft([10], NgramIndex(), 2, constraint).token_ids == (11, 12)
    assert draft([10], NgramIndex(), 0, constraint).token_ids == ()


def _engine(backend, speculative_tokens: int, max_new_tokens: int = MAX_NEW):
    scheduler = make_scheduler(SchedulerConfig(policy="fcfs", batch_size=8), PRESETS["a100-4b"])
    return backend.make_engine(scheduler, max_new_tokens=max_new_tokens, speculative_tokens=speculative_tokens)


@pytest.mark.parametrize("speculative_tokens", [1, 4, 12])
def test_speculative_decoding_emits_the_greedy_tokens_alone_and_batched(tiny_backend, prompts, solo,
                                                                       speculative_tokens):
    engine = _engine(tiny_backend, speculative_tokens)
    requests = [engine.add_request(f"r{i}", tiny_backend.encode(prompt), level=3, predicted_output_tokens=MAX_NEW)
                for i, prompt in enumerate(prompts)]
    done = engine.run_until_idle()
    assert [list(done[f"r{i}"].token_ids) for i in range(len(prompts))] == [list(s) for s in solo]
    assert engine.drafted_tokens > 0 and engine.accepted_tokens > 0
    assert engine.iterations < sum(len(s) for s in solo)  # fewer passes than tokens: drafts were accepted
    assert all(done[f"r{i}"].acceptance_rate is not None for i in range(len(prompts)))
    for r in requests:  # the scheduler sees each round's acceptance (LAPS-SD's stability test reads it)
        assert (r.drafted_tokens, r.accepted_tokens) == (done[r.id].drafted_tokens, done[r.id].accepted_tokens)
        assert r.draft_rounds > 0 and r.acceptance_trace[-1] == pytest.approx(done[r.id].acceptance_rate)


def test_speculative_decoding_under_a_read_out_gives_the_constrained_greedy_text_in_fewer_steps(tiny_backend):
    records = [r for r in example_records() if r["esi"] <= 2][:4]
    plans = [record_plan(r, load_library()) for r in records]

    def run(speculative_tokens: int):
        engine = _engine(tiny_backend, speculative_tokens, max_new_tokens=384)
        for i, (record, plan) in enumerate(zip(records, plans, strict=True)):
            engine.add_request(f"c{i}", record_prompt(record), level=1, predicted_output_tokens=64,
                               read_out=plan.sentences)
        return engine, engine.run_until_idle()

    plain_engine, plain = run(0)
    fast_engine, fast = run(8)
    for i in range(len(records)):
        assert fast[f"c{i}"].token_ids == plain[f"c{i}"].token_ids
        assert fast[f"c{i}"].reason == plain[f"c{i}"].reason
    assert fast_engine.iterations * 2 < plain_engine.iterations
    assert fast_engine.accepted_tokens / fast_engine.drafted_tokens > 0.8  # forced tokens are always accepted


def test_a_request_preempted_while_speculating_resumes_with_the_greedy_tokens(tiny_backend, prompts, solo):
    scheduler = ScriptedScheduler({4: [("r0", PreemptionMode.PARTIAL, 10_000)], 6: [("r1", PreemptionMode.DROP, 0)]})
    engine = tiny_backend.make_engine(scheduler, max_new_tokens=MAX_NEW, clock=lambda: 0.0, speculative_tokens=6)
    for i in range(3):
        engine.add_request(f"r{i}", tiny_backend.encode(prompts[i]), level=3, predicted_output_tokens=MAX_NEW)
    done = engine.run_until_idle(max_steps=2000)
    assert [list(done[f"r{i}"].token_ids) for i in range(3)] == [list(s) for s in solo[:3]]


def test_no_drafts_in_a_pass_that_carries_an_esi_1_or_2_prefill():
    from inference.speculation import drafts_allowed
    from scheduler.request import Request

    def request(level: int, decoding: bool) -> Request:
        r = Request(id=f"{level}{decoding}", level=level, arrival_s=0.0, prompt_tokens=20, predicted_output_tokens=9)
        if decoding:  # prefilled and one token out: its next step decodes
            r.generated_tokens, r.kv_tokens_on_device = 1, 20
        return r

    assert drafts_allowed([request(1, True), request(4, False)])  # a lower level's first token: drafts go on
    assert not drafts_allowed([request(4, True), request(2, False)])  # an ESI-2 call's first token waits on the pass
    assert drafts_allowed([])
