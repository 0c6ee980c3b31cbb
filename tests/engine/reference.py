"""What a request would produce alone, without any batching or preemption: greedy `model.generate`."""

from __future__ import annotations

from tools.gpu_bench.sections import solo_greedy
from training.guidance_corpus import example_records, record_prompt

__all__ = ["SOLO_MAX_NEW", "corpus_prompts", "solo_greedy"]
SOLO_MAX_NEW = 40  # the tokens of the reference outputs the exactness tests compare against


def corpus_prompts(n: int, stride: int = 5) -> list[str]:
    """n served prompts of written calls of different protocols (the tiny model's training calls)."""
    records = example_records()
    return [record_prompt(records[(i * stride) % len(records)]) for i in range(n)]
