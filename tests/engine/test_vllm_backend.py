"""The vLLM backend's priority mapping (no vLLM needed) and its lazy import."""

from __future__ import annotations

import importlib.util

import pytest

from inference.backends.vllm import VllmUnavailable, import_vllm, vllm_priority

HAS_VLLM = importlib.util.find_spec("vllm") is not None


def test_every_esi1_call_outranks_every_esi2_call_whatever_its_length():
    assert vllm_priority(1, predicted_output_tokens=10_000) < vllm_priority(2, predicted_output_tokens=1)
    assert max(vllm_priority(level, 9, 10_000) for level in [3]) < min(vllm_priority(4, 0, 0) for _ in [0])


def test_within_a_level_shorter_predicted_guidance_runs_first():
    assert vllm_priority(3, predicted_output_tokens=16) < vllm_priority(3, predicted_output_tokens=200)


def test_an_invalid_level_is_refused():
    with pytest.raises(ValueError):
        vllm_priority(0)


@pytest.mark.skipif(HAS_VLLM, reason="vLLM is installed here: the missing-vLLM message cannot be observed")
def test_without_vllm_the_backend_explains_what_to_install():
    with pytest.raises(VllmUnavailable, match="vllm"):
        import_vllm()


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_VLLM, reason="vLLM is not installed (GPU image only: pip install '.[vllm]')")
def test_vllm_generates_guidance_with_priorities(tiny_guidance_model):
    from inference.backends.vllm import VllmBackend

    backend = VllmBackend.load(str(tiny_guidance_model), gpu_memory_utilization=0.2)
    out = backend.generate(["Call: my husband collapsed\nGuidance:"], levels=[1], max_new_tokens=16)
    assert len(out) == 1
