"""The bundled guidance model reads out the protocol text its prompt carries: the plan of the call's protocol
and level, or its family's key questions when the protocol is unclear."""

from __future__ import annotations

import random

import pytest

from inference.guidance.guard import StreamGuard
from inference.guidance.plan import ASK, normalise_transcript
from judgment.protocols import UNCLEAR, load_library
from scheduler.config import SchedulerConfig
from scheduler.cost import PRESETS
from scheduler.policies import make_scheduler
from training.guidance_corpus import (
    UNCLEAR_SHARE,
    example_records,
    follows_plan,
    load_written,
    record_plan,
    record_prompt,
    training_pairs,
)
from training.guidance_llm import _length_buckets


def _generate(backend, records: list[dict], max_new_tokens: int = 384) -> list[str]:
    scheduler = make_scheduler(SchedulerConfig(policy="fcfs", batch_size=16), PRESETS["a100-4b"])
    engine = backend.make_engine(scheduler, max_new_tokens=max_new_tokens)
    return engine.generate([record_prompt(r) for r in records])


def test_a_training_pair_teaches_the_plan_of_the_calls_protocol_and_level():
    record = next(r for r in load_written() if r["protocol"] == "choking" and r["esi"] == 1)
    [(prompt, guidance), *_] = training_pairs([record], seed=1)
    plan = record_plan(record)
    band = load_library().protocols["choking"].band(1)
    assert plan.protocol == "choking" and plan.band == band.label
    assert guidance == plan.text and guidance.startswith(band.send)
    assert prompt.startswith(f"Protocol: choking v{plan.protocol_version}, ESI {band.label}\nInstructions: {plan.text}\n")
    assert prompt.endswith("\nGuidance:")


def test_a_share_of_calls_is_also_taught_its_familys_questions_deterministically():
    records = load_written()[:400]
    pairs = training_pairs(records, seed=3)
    assert pairs == training_pairs(records, seed=3)
    unclear = [(p, g) for p, g in pairs if p.startswith(f"Protocol: {UNCLEAR} (")]
    assert len(pairs) == len(records) + len(unclear)
    assert 0.5 * UNCLEAR_SHARE * len(records) < len(unclear) < 1.5 * UNCLEAR_SHARE * len(records)
    assert all(ASK in g for _, g in unclear)


def test_a_share_of_calls_is_also_taught_another_protocols_plan_as_after_a_switch():
    """The guidance is the plan in the prompt, whatever the call's words suggest."""
    records = load_written()[:400]
    by_transcript = {normalise_transcript(r["transcript"])[:200]: r for r in records}  # prompts cut long calls
    pairs = training_pairs(records, seed=3, switched_share=0.25)
    assert pairs == training_pairs(records, seed=3, switched_share=0.25)
    def switched(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
        out = []
        for prompt, guidance in pairs:
            call = by_transcript[prompt.rsplit("\nCall: ", 1)[1].removesuffix("\nGuidance:")[:200]]
            if not prompt.startswith((f"Protocol: {call['protocol']} v", f"Protocol: {UNCLEAR} (")):
                out.append((prompt, guidance))
        return out

    taught = switched(pairs)
    assert 0.5 * 0.25 * len(records) < len(taught) < 1.5 * 0.25 * len(records)
    assert all(f"Instructions: {guidance}\n" in prompt for prompt, guidance in taught)
    assert switched(training_pairs(records, seed=3)) == []  # off by default


def test_example_records_cover_every_protocol_at_both_ends_of_its_levels():
    examples = example_records()
    library = load_library()
    assert {r["protocol"] for r in examples} == set(library.ids)
    for protocol in library.ids:
        levels = [r["esi"] for r in load_written() if r["protocol"] == protocol]
        mine = {r["esi"] for r in examples if r["protocol"] == protocol}
        assert min(levels) in mine and max(levels) in mine


def test_length_buckets_cover_an_epoch_with_little_padding():
    rng = random.Random(0)
    examples = [([0] * rng.randint(20, 450), []) for _ in range(1000)]
    batches = _length_buckets(examples, 16, random.Random(1))
    assert sorted(len(x[0]) for b in batches for x in b) == sorted(len(x[0]) for x in examples)
    assert [[len(x[0]) for x in b] for b in batches] == [
        [len(x[0]) for x in b] for b in _length_buckets(examples, 16, random.Random(1))
    ]
    padded = sum(len(b) * max(len(x[0]) for x in b) for b in batches)
    assert padded < 1.1 * sum(len(x[0]) for x in examples)


def test_tiny_model_reads_out_the_protocol_of_the_calls_it_was_taught(tiny_backend):
    """The tiny model learns its few calls by heart; the guard passes what it says for them."""
    records = [r for r in example_records() if r["protocol"] in ("cardiac_arrest", "medication_question")]
    outputs = _generate(tiny_backend, records)
    read_out = sum(follows_plan(text, record_plan(r)) for r, text in zip(records, outputs, strict=True))
    assert read_out >= len(records) - 1
    arrest = next(t for r, t in zip(records, outputs, strict=True) if r["protocol"] == "cardiac_arrest")
    assert "compressions" in arrest


@pytest.mark.slow
def test_full_model_reads_out_the_protocol_of_calls_it_never_saw(full_guidance_model):
    """Development-set calls (never trained on) of the protocols where a wrong word costs a life: the guidance
    is the plan's text, and the stream guard finds no sentence off protocol. The whole evaluation sets are
    measured in the model card (build_models)."""
    import json
    from pathlib import Path

    from inference.backends.hf import HFBackend

    folder = Path(__file__).resolve().parents[2] / "fixtures" / "evaluation" / "development"
    records = [json.loads(line) for f in sorted(folder.glob("*.jsonl")) for line in f.read_text().splitlines()
               if line.strip()]
    records = [r for r in records if r["protocol"] in ("cardiac_arrest", "choking", "drowning", "bleeding")]
    backend = HFBackend.load(str(full_guidance_model), device="cpu")
    for r, text in zip(records, _generate(backend, records), strict=True):
        plan = record_plan(r)
        guard = StreamGuard(plan.template)
        guard.feed(text)
        guard.finish()
        assert guard.off_protocol == 0 and follows_plan(text, plan), (r["id"], text[:160])


def test_a_constrained_read_out_holds_the_output_to_the_plans_sentences_even_against_the_prompt(tiny_backend):
    """The worker's strict mode: every token is held to the plan, so the guard can find nothing off it. Here
    the prompt carries another protocol's text, which the model would read out unconstrained."""
    library = load_library()
    record = next(r for r in example_records() if r["protocol"] == "cardiac_arrest")
    other = record_plan({**record, "protocol": "medication_question", "esi": 5}, library)
    scheduler = make_scheduler(SchedulerConfig(policy="fcfs", batch_size=4), PRESETS["a100-4b"])
    engine = tiny_backend.make_engine(scheduler, max_new_tokens=384)
    engine.add_request("free", record_prompt(record), level=1, predicted_output_tokens=64)
    engine.add_request("held", record_prompt(record), level=1, predicted_output_tokens=64, read_out=other.sentences)
    done = engine.run_until_idle()

    def off_protocol(text: str) -> int:
        guard = StreamGuard(other.template)
        guard.feed(text)
        guard.finish()
        return guard.off_protocol

    assert done["held"].reason == "eos" and done["held"].text.strip()
    assert off_protocol(done["held"].text) == 0
    assert off_protocol(done["free"].text) > 0  # unconstrained it reads the prompt's protocol
