"""The same engine on CUDA: swapping to pinned host memory and back keeps outputs exact."""

from __future__ import annotations

import pytest
import torch

from scheduler.decision import PreemptionMode
from tests.engine.reference import corpus_prompts, solo_greedy
from tools.gpu_bench.scripted import ScriptedScheduler

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available on this machine"),
]


def test_swap_drop_and_partial_keep_on_cuda_resume_with_solo_outputs(tiny_guidance_model):
    from inference.backends.hf import HFBackend

    backend = HFBackend.load(str(tiny_guidance_model), device="cuda", dtype=torch.float32)
    prompts = corpus_prompts(3)
    solo = [solo_greedy(backend, backend.encode(p), 32) for p in prompts]
    script = {4: [("r0", PreemptionMode.SWAP, None), ("r1", PreemptionMode.DROP, 0)],
              8: [("r2", PreemptionMode.PARTIAL, 6)]}
    engine = backend.make_engine(ScriptedScheduler(script), max_new_tokens=32, clock=lambda: 0.0)
    for i, p in enumerate(prompts):
        engine.add_request(f"r{i}", p, level=2, predicted_output_tokens=32)
    done = engine.run_until_idle()
    assert [done[f"r{i}"].token_ids for i in range(3)] == solo
