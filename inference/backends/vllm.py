"""The vLLM backend for GPU deployments (`INFERENCE_BACKEND=vllm`), imported lazily.

vLLM 0.33 pins torch 2.14 and transformers < 5.21 and ships CUDA-only wheels, so it lives in its own
environment (the `vllm` extra, the GPU image); nothing here imports it until a backend is built.

Two modes:
- `priority` (default): vLLM's own V1 scheduler with `scheduling_policy="priority"`; each call's ESI level and
  tier map to vLLM's integer `priority` (lower runs first, ties by arrival). What it gives up against our
  engine: V1 preempts only by recompute (no swap, no partial keep of m* tokens), and only when a running
  request cannot get KV blocks, so an urgent arrival waits for a free slot rather than displacing a running,
  less urgent request (no preempt-on-arrival); no stage awareness, no TRAIL refinement, no aging.
- `semantic`: our policy through vLLM's `scheduler_cls` hook (`semantic_scheduler_cls`): the ordering key is
  ours (effective level, predicted remaining time); execution (paging, preemption mechanics) stays vLLM's,
  so evictions are still recompute-only.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

# Distance between tiers in vLLM priority units; leaves room for ordering inside a level (see `vllm_priority`).
LEVEL_STRIDE = 1000


class VllmUnavailable(RuntimeError):
    pass


def vllm_priority(level: int, tier_sort_order: int | None = None, predicted_output_tokens: int | None = None) -> int:
    """vLLM `priority` for a call: lower runs first. ESI level dominates (1 before 2 ... before 5); inside a
    level, the tier's sort order, then shorter predicted outputs first (the semantic key's second part,
    bucketed so requests of similar length keep FIFO order by arrival)."""
    if not 1 <= int(level) <= 5:
        raise ValueError("level must be an ESI level 1..5")
    tier_part = 0 if tier_sort_order is None else min(max(int(tier_sort_order), 0), 9) * 100
    length_part = 0 if predicted_output_tokens is None else min(max(int(predicted_output_tokens), 0) // 8, 99)
    return int(level) * LEVEL_STRIDE + tier_part + length_part


def import_vllm():  # noqa: ANN201 - the vllm module
    try:
        return importlib.import_module("vllm")
    except ImportError as exc:
        raise VllmUnavailable(
            "INFERENCE_BACKEND=vllm needs vLLM (a CUDA machine and the `vllm` extra: pip install '.[vllm]' in the "
            "GPU image); it is not installed in this environment"
        ) from exc


def semantic_scheduler_cls():  # noqa: ANN201 - a vllm Scheduler subclass
    """A vLLM V1 scheduler whose waiting queue is ordered by our semantic key: (level, predicted remaining)."""
    import_vllm()
    from vllm.v1.core.sched.scheduler import Scheduler as VllmScheduler

    class SemanticVllmScheduler(VllmScheduler):
        # vLLM orders its priority queue by (request.priority, arrival_time): we encode the semantic key into
        # `priority` at submission (vllm_priority), so the stock queue enforces it; re-prioritisation is a
        # cancel + resubmit with the new priority.
        pass

    return SemanticVllmScheduler


@dataclass
class VllmBackend:
    llm: object
    mode: str

    @classmethod
    def load(cls, model_path: str, mode: str = "priority", **engine_kwargs: object) -> VllmBackend:
        vllm = import_vllm()
        kwargs = dict(engine_kwargs)
        kwargs["scheduling_policy"] = "priority"
        if mode == "semantic":
            kwargs["scheduler_cls"] = semantic_scheduler_cls()
        elif mode != "priority":
            raise ValueError("mode must be 'priority' or 'semantic'")
        return cls(vllm.LLM(model=model_path, **kwargs), mode)

    def generate(self, prompts: list[str], levels: list[int], max_new_tokens: int = 384,
                 predicted_output_tokens: list[int] | None = None) -> list[str]:
        vllm = import_vllm()
        params = vllm.SamplingParams(temperature=0.0, max_tokens=max_new_tokens)
        predicted = predicted_output_tokens or [None] * len(prompts)
        priorities = [vllm_priority(level, None, p) for level, p in zip(levels, predicted, strict=True)]
        outputs = self.llm.generate(prompts, params, priority=priorities)
        return [o.outputs[0].text for o in outputs]
