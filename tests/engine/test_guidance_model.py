"""The guidance the bundled model drafts fits its call: CPR instructions for an arrest, a one-line answer for a
prescription question."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from inference.guidance_corpus import (
    OPENING_WORDS,
    augmented_records,
    example_records,
    fits_call,
    guidance_fit,
    guidance_prompt,
    neutral_fragments,
    reference_guidance,
    swap_synonyms,
)
from inference.llm_training import _length_buckets
from scheduler.config import SchedulerConfig
from scheduler.cost import PRESETS
from scheduler.policies import make_scheduler

CALLS = Path(__file__).resolve().parents[2] / "fixtures" / "calls" / "calls.jsonl"


def _generate(backend, transcripts: list[str], max_new_tokens: int = 320) -> list[str]:
    scheduler = make_scheduler(SchedulerConfig(policy="fcfs", batch_size=16), PRESETS["a100-4b"])
    engine = backend.make_engine(scheduler, max_new_tokens=max_new_tokens)
    return engine.generate([guidance_prompt(t) for t in transcripts])


def _examples(scenario: str) -> list[dict]:
    return [r for r in example_records() if r["scenario"] == scenario]


def _train_calls(limit: int = 600) -> list[dict]:
    if not CALLS.exists():
        return example_records()
    records = [json.loads(line) for line in CALLS.read_text().splitlines()]
    return [r for r in records if r["split"] == "train"][::4][:limit] + example_records()


def test_augmented_calls_keep_their_guidance_and_are_deterministic():
    records = _train_calls()
    copies = augmented_records(records, copies=2, seed=7)
    assert copies == augmented_records(records, copies=2, seed=7)
    assert len(copies) == 2 * len(records)
    originals = {r["id"]: r for r in records}
    changed = 0
    for copy in copies:
        original = originals[copy["id"].split("~")[0]]
        assert reference_guidance(copy) == reference_guidance(original)
        assert copy["transcript"].strip()
        changed += copy["transcript"] != original["transcript"]
    assert changed > 0.9 * len(copies)


def test_synonym_swaps_say_a_finding_in_other_words_of_its_group_only():
    text = "He's unconscious and gasping, lips blue, skin clammy, at 12 Elm Road."
    assert swap_synonyms(text, random.Random(3), rate=0.0) == text
    swapped = swap_synonyms(text, random.Random(3), rate=1.0)
    assert swapped == swap_synonyms(text, random.Random(3), rate=1.0)
    for original, group in [("unconscious", {"unresponsive", "not responding", "out cold", "not waking up",
                                              "completely out of it"}),
                            ("gasping", {"barely breathing", "hardly breathing", "breathing very strangely"}),
                            ("blue", {"purple", "dusky"}),
                            ("clammy", {"cold and sweaty", "sweaty"})]:
        assert original not in swapped
        assert any(p in swapped for p in group)
    assert swapped.startswith("He's ") and swapped.endswith(" at 12 Elm Road.")


def test_neutral_fragments_are_talk_not_symptoms():
    records = [
        {"scenario": s, "esi": e, "transcript": f"Hello? Sorry to bother you, {t}. The dog's barking."}
        for s, e, t in [("a", 1, "he is not breathing"), ("b", 3, "she cut her hand"), ("c", 5, "I have a cold"),
                        ("a", 1, "he collapsed, no pulse")]
    ]
    neutral = neutral_fragments(records)
    assert {"hello", "sorry to bother you", "the dogs barking"} <= neutral
    assert not any("breathing" in k or "pulse" in k or "cold" in k for k in neutral)


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


def test_tiny_model_gives_an_arrest_call_cpr_instructions(tiny_backend):
    calls = _examples("cardiac_arrest")
    for text in _generate(tiny_backend, [r["transcript"] for r in calls]):
        assert "chest compressions" in text and "defibrillator" in text


def test_tiny_model_answers_a_prescription_question_briefly_and_sends_no_unit(tiny_backend):
    calls = _examples("medication_question")
    arrest_len = len(reference_guidance(_examples("cardiac_arrest")[0]))
    for text in _generate(tiny_backend, [r["transcript"] for r in calls]):
        assert "pharmacist" in text and "Send" not in text
        assert len(text) < arrest_len / 5


@pytest.mark.slow
def test_full_model_gives_arrest_calls_cpr_and_choking_calls_back_blows(full_guidance_model):
    """One call of every training template of the two scenarios where a wrong opening costs a life. How far
    this carries to wording the model has never seen is measured, not asserted here: the model card's "Does the
    guidance fit the call?" (test split by scenario; BENCHMARKS.md)."""
    from inference.backends.hf import HFBackend

    records = [json.loads(line) for line in CALLS.read_text().splitlines()]
    first_of_template = {}
    for r in records:
        if r["split"] == "train" and r["esi"] <= 2 and r["scenario"] in ("cardiac_arrest", "choking"):
            first_of_template.setdefault(r["template_id"], r)
    calls = list(first_of_template.values())
    backend = HFBackend.load(str(full_guidance_model), device="cpu")
    outputs = _generate(backend, [r["transcript"] for r in calls], max_new_tokens=384)
    for r, text in zip(calls, outputs, strict=True):
        if r["scenario"] == "cardiac_arrest":
            # Choking, overdose and chest-pain guidance mention compressions too; only the arrest guidance sends
            # a defibrillator with them.
            assert "compressions" in text and "defibrillator" in text, (r["template_id"], text[:120])
        else:
            assert "blows" in text or "thrusts" in text, (r["template_id"], text[:120])


def test_guidance_fit_counts_a_call_whose_guidance_opens_as_its_reference_by_split_and_scenario():
    arrest, medication = _examples("cardiac_arrest")[0], _examples("medication_question")[0]
    records = [{**arrest, "split": "test"}, {**medication, "split": "test"}, {**arrest, "id": "a2", "split": "train"}]
    texts = {
        arrest["id"]: reference_guidance(arrest),
        medication["id"]: reference_guidance(arrest),  # arrest guidance for a prescription question: no fit
        "a2": " ".join(reference_guidance(arrest).split()[:OPENING_WORDS]) + " and then something else entirely",
    }
    fit = guidance_fit(records, texts)
    assert fit["test"]["calls"] == 2 and fit["test"]["fit"] == 0.5
    assert fit["test"]["by_scenario"] == {"cardiac_arrest": {"calls": 1, "fit": 1.0},
                                          "medication_question": {"calls": 1, "fit": 0.0}}
    assert fit["train"] == {"calls": 1, "fit": 1.0, "by_scenario": {"cardiac_arrest": {"calls": 1, "fit": 1.0}}}
    assert not fits_call(" ".join(reference_guidance(arrest).split()[: OPENING_WORDS - 1]), arrest)
