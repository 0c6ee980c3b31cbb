"""What a request would produce alone, without any batching or preemption: greedy `model.generate`."""

from __future__ import annotations

import torch

from inference.guidance.corpus import example_records, record_prompt


def solo_greedy(backend, prompt_ids: list[int], max_new_tokens: int) -> tuple[int, ...]:
    ids = torch.tensor([prompt_ids], device=backend.device)
    with torch.inference_mode():
        out = backend.model.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens, do_sample=False,
            eos_token_id=backend.eos_token_id, pad_token_id=backend.pad_token_id,
        )
    return tuple(out[0, len(prompt_ids):].tolist())


def corpus_prompts(n: int, stride: int = 5) -> list[str]:
    """n served prompts of written calls of different protocols (the tiny model's training calls)."""
    records = example_records()
    return [record_prompt(records[(i * stride) % len(records)]) for i in range(n)]
