"""Preempted-and-resumed requests produce exactly the tokens they would have produced alone (greedy decoding),
whatever the preemption mode and whoever shares their batches."""

from __future__ import annotations

import pytest

from inference.engine import Engine
from scheduler.decision import PreemptionMode
from tests.engine.reference import SOLO_MAX_NEW
from tools.gpu_bench.scripted import ScriptedScheduler

MAX_NEW = SOLO_MAX_NEW
SWAP, DROP, PARTIAL = PreemptionMode.SWAP, PreemptionMode.DROP, PreemptionMode.PARTIAL


def _run(backend, prompts, script, **kwargs):
    scheduler = ScriptedScheduler(script, **kwargs)
    engine: Engine = backend.make_engine(scheduler, max_new_tokens=MAX_NEW, clock=lambda: 0.0)
    ids = {}
    for i, prompt in enumerate(prompts):
        ids[f"r{i}"] = backend.encode(prompt)
        engine.add_request(f"r{i}", ids[f"r{i}"], level=3, predicted_output_tokens=MAX_NEW)
    done = engine.run_until_idle(max_steps=2000)
    return engine, ids, done


@pytest.mark.parametrize(
    ("mode", "kept"),
    [(SWAP, None), (DROP, 0), (PARTIAL, 5), (PARTIAL, 10_000)],
    ids=["swap", "drop-recompute", "partial-keep-inside-prompt", "partial-keep-into-decoded-tokens"],
)
def test_resumed_request_emits_the_tokens_it_would_have_emitted_without_preemption(
    tiny_backend, prompts, solo, mode, kept
):
    # Preempt r0 in its decode phase (iteration 6), resume it two iterations later, beside r1 and r2.
    engine, _, done = _run(tiny_backend, prompts[:3], {6: [("r0", mode, kept)]})
    assert engine.preemptions_by_mode[str(mode)] == 1
    for i in range(3):
        assert done[f"r{i}"].token_ids == solo[i]


def test_partial_keep_beyond_the_prompt_recomputes_only_the_dropped_tail(tiny_backend, prompts, solo):
    prompt_len = len(tiny_backend.encode(prompts[0]))
    # At iteration 9 r0 has prompt + 7 decoded tokens of KV; keep the prompt and 3 of them.
    engine, _, done = _run(tiny_backend, prompts[:1], {9: [("r0", PARTIAL, prompt_len + 3)]})
    assert done["r0"].token_ids == solo[0]
    assert engine.store.swapped_out_tokens == prompt_len + 3


def test_mixed_batches_with_every_mode_and_repeated_preemptions_match_solo_generation(tiny_backend, prompts, solo):
    script = {
        2: [("r0", SWAP, None)],  # right after its prefill
        4: [("r1", DROP, 0), ("r2", PARTIAL, 4)],
        7: [("r0", DROP, 0), ("r3", SWAP, None)],  # r0 a second time, now fully recomputed
        9: [("r4", PARTIAL, 20), ("r5", SWAP, None)],
        13: [("r0", PARTIAL, 12), ("r2", SWAP, None)],
    }
    engine, _, done = _run(tiny_backend, prompts, script, batch_size=4)
    assert {"swap", "drop", "partial"} <= set(engine.preemptions_by_mode)
    for i in range(len(prompts)):
        assert done[f"r{i}"].token_ids == solo[i], f"r{i} diverged"


def test_requests_joining_a_running_batch_do_not_change_its_members_outputs(tiny_backend, prompts, solo):
    scheduler = ScriptedScheduler(batch_size=8)
    engine = tiny_backend.make_engine(scheduler, max_new_tokens=MAX_NEW, clock=lambda: 0.0)
    for i, prompt in enumerate(prompts):
        engine.add_request(f"r{i}", prompt, level=3, predicted_output_tokens=MAX_NEW)
        for _ in range(3):  # each arrival joins a batch already decoding
            engine.step()
    done = engine.run_until_idle()
    assert [done[f"r{i}"].token_ids for i in range(len(prompts))] == solo


def test_a_batch_the_scheduler_reorders_every_step_keeps_its_rows_and_its_outputs(tiny_backend, prompts, solo):
    scheduler = ScriptedScheduler(batch_size=8, reorder_seed=3)
    engine = tiny_backend.make_engine(scheduler, max_new_tokens=MAX_NEW, clock=lambda: 0.0)
    for i, prompt in enumerate(prompts[:4]):
        engine.add_request(f"r{i}", prompt, level=3, predicted_output_tokens=MAX_NEW)
    engine.step()
    rows = engine.runner.batch_ids
    for _ in range(5):
        listed = engine.step().batch_ids
        assert engine.runner.batch_ids == rows  # the batched cache was not rebuilt in the new order
    assert sorted(listed) == sorted(rows) and listed != rows
    done = engine.run_until_idle()
    assert [done[f"r{i}"].token_ids for i in range(4)] == solo[:4]


def test_streamed_token_texts_add_up_to_the_final_text_in_index_order(tiny_backend, prompts):
    scheduler = ScriptedScheduler({3: [("r0", DROP, 0)]})
    engine = tiny_backend.make_engine(scheduler, max_new_tokens=MAX_NEW, clock=lambda: 0.0)
    engine.add_request("r0", prompts[0], level=1, predicted_output_tokens=MAX_NEW)
    engine.add_request("r1", prompts[1], level=1, predicted_output_tokens=MAX_NEW)
    streamed: dict[str, list] = {"r0": [], "r1": []}
    finals = {}
    while engine.has_work():
        result = engine.step()
        for t in result.tokens:
            streamed[t.request_id].append(t)
        finals.update({f.request_id: f for f in result.finished})
    for rid, tokens in streamed.items():
        assert [t.index for t in tokens] == list(range(len(tokens)))
        assert "".join(t.text for t in tokens) == finals[rid].text
        assert len(tokens) == finals[rid].output_tokens


def test_a_cancelled_request_frees_its_cache_and_reports_cancelled(tiny_backend, prompts):
    scheduler = ScriptedScheduler()
    engine = tiny_backend.make_engine(scheduler, max_new_tokens=MAX_NEW, clock=lambda: 0.0)
    engine.add_request("keep", prompts[0], level=3, predicted_output_tokens=10)
    engine.add_request("gone", prompts[1], level=3, predicted_output_tokens=10)
    for _ in range(3):
        engine.step()
    engine.cancel("gone")
    result = engine.step()
    assert [(f.request_id, f.reason) for f in result.finished] == [("gone", "cancelled")]
    assert "gone" not in engine.runner.batch_ids and engine.store.tokens("gone") == 0
    assert "gone" not in engine.sequences


def test_an_over_long_transcript_keeps_its_end_and_still_gets_guidance(tiny_backend, prompts):
    engine = tiny_backend.make_engine(ScriptedScheduler(), max_new_tokens=16, clock=lambda: 0.0)
    long_prompt = "help " * 2000 + prompts[0]
    request = engine.add_request("long", long_prompt, level=1, predicted_output_tokens=16)
    assert request.prompt_tokens <= tiny_backend.max_positions - 16
    assert engine.sequences["long"].token_ids[-5:] == tiny_backend.encode(prompts[0])[-5:]
    done = engine.run_until_idle()
    assert done["long"].output_tokens >= 1
