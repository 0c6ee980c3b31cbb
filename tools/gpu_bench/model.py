"""A Llama-architecture model of realistic cost with random weights, and the tokenizer of the prepared calls.

``LARGE`` is about 1.0B parameters (TinyLlama's shape: 22 layers, hidden 2048, 32 heads, 4 key/value heads);
``TINY`` runs the same code in seconds on a CPU. Weights are seeded, so two runs build the same model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from inference.backends.hf import HFBackend

PREPARED = Path(__file__).resolve().parents[2] / "fixtures" / "gpu_bench"


@dataclass(frozen=True)
class Shape:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    max_positions: int = 2048


LARGE = Shape(layers=22, hidden=2048, heads=32, kv_heads=4, intermediate=5632)
TINY = Shape(layers=2, hidden=64, heads=4, kv_heads=2, intermediate=128, max_positions=1024)


def load_tokenizer(directory: Path = PREPARED) -> PreTrainedTokenizerFast:
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(directory / "tokenizer.json"), pad_token="<pad>",
                                        bos_token="<s>", eos_token="</s>", padding_side="left")
    return tokenizer


def build(shape: Shape, device: torch.device, dtype: torch.dtype, tokenizer: PreTrainedTokenizerFast,
          seed: int = 0) -> HFBackend:
    """The model on ``device`` in ``dtype``, as the engine's backend."""
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=shape.hidden, num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads, intermediate_size=shape.intermediate,
        max_position_embeddings=shape.max_positions, pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    with torch.device(device):
        model = LlamaForCausalLM(config)
    with torch.no_grad():  # logit 0 for EOS and padding among random ones: every answer runs to its cap
        for token in {tokenizer.eos_token_id, tokenizer.pad_token_id}:
            model.lm_head.weight[token].zero_()
    model = model.to(dtype=dtype).eval()
    return HFBackend(model, tokenizer, device)


def parameters(backend: HFBackend) -> int:
    return sum(p.numel() for p in backend.model.parameters())
