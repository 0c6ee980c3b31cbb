"""TRAIL refinement: the probe learns remaining-length bins from hidden states, the Bayesian update smooths
them, and the engine hands each refined estimate to the scheduler."""

from __future__ import annotations

import torch

from inference.length_probe import LengthProbe, LengthRefiner, bin_of
from scheduler.config import SchedulerConfig
from scheduler.cost import PRESETS
from scheduler.policies import make_scheduler
from tests.engine.reference import corpus_prompts
from training.length_probe import Trace, evaluate_probe, train_probe


def _synthetic_traces(n: int, seed: int) -> list[Trace]:
    """Hidden states that (noisily) encode the remaining length, as a real layer's do."""
    gen = torch.Generator().manual_seed(seed)
    traces = []
    for i in range(n):
        length = int(torch.randint(10, 200, (1,), generator=gen))
        remaining = torch.arange(length - 1, 0, -1, dtype=torch.float)
        signal = torch.log1p(remaining)[:, None] * torch.ones(1, 16)
        traces.append(Trace(f"t{i}", signal + 0.8 * torch.randn(len(remaining), 16, generator=gen), length))
    return traces


def test_the_smoothed_probe_beats_a_constant_prompt_only_guess_and_improves_as_decoding_proceeds(tmp_path):
    probe = train_probe(_synthetic_traces(120, 0), layer=1, epochs=15)
    probe.save(tmp_path)
    probe = LengthProbe.load(tmp_path)
    test = _synthetic_traces(40, 1)
    rows = evaluate_probe(probe, test, {t.request_id: 100.0 for t in test}, positions=(1, 8, 32))
    by_position = {r["position"]: r for r in rows}
    assert by_position[8]["probe_mae"] < by_position[8]["prompt_only_mae"]
    assert by_position[32]["probe_mae"] < by_position[1]["probe_mae"]


def test_bins_cover_every_remaining_length():
    assert [bin_of(n) for n in (0, 7, 8, 31, 255, 256, 10_000)] == [0, 0, 1, 2, 5, 6, 6]


def test_the_engine_passes_each_refined_estimate_to_the_scheduler(tiny_backend):
    class FixedRefiner:
        layer = 1

        def __init__(self):
            self.seen: list[tuple[str, int]] = []

        def observe(self, request_id, hidden, generated_tokens):
            assert hidden.shape[-1] == tiny_backend.model.config.hidden_size
            self.seen.append((request_id, generated_tokens))
            return 7.0

        def forget(self, request_id):
            pass

    scheduler = make_scheduler(SchedulerConfig(policy="semantic", batch_size=4), PRESETS["a100-4b"])
    refiner = FixedRefiner()
    engine = tiny_backend.make_engine(scheduler, max_new_tokens=12, refiner=refiner)
    request = engine.add_request("a", corpus_prompts(1)[0], level=2, predicted_output_tokens=300)
    for _ in range(3):
        engine.step()
    assert refiner.seen[:3] == [("a", 1), ("a", 2), ("a", 3)]
    assert request.refined_remaining_tokens is not None and request.refined_remaining_tokens <= 7.0


def test_a_refiner_keeps_one_posterior_per_request():
    probe = train_probe(_synthetic_traces(30, 2), layer=1, epochs=3)
    refiner = LengthRefiner(probe)
    h = torch.zeros(16)
    refiner.observe("a", h, 1)
    refiner.observe("b", h, 1)
    refiner.forget("a")
    assert set(refiner._posterior) == {"b"}
