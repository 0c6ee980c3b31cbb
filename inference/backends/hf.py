"""The transformers backend: loads a causal LM and its tokenizer (a local path or a hub id) on CPU or CUDA,
and builds the engine around it."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from inference.engine import Engine, LengthRefiner
from inference.kv_store import KVStore
from inference.model_runner import ModelRunner
from scheduler.decision import Scheduler


def resolve_device(device: str | None = None) -> torch.device:
    """`INFERENCE_DEVICE` (cpu, cuda, cuda:1, auto); auto picks CUDA when present."""
    name = (device or os.environ.get("INFERENCE_DEVICE") or "cpu").lower()
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"INFERENCE_DEVICE={name} but CUDA is not available on this machine")
    return torch.device(name)


@dataclass
class HFBackend:
    model: torch.nn.Module
    tokenizer: object
    device: torch.device

    @classmethod
    def load(cls, model_path: str, device: str | None = None, dtype: torch.dtype | None = None) -> HFBackend:
        dev = resolve_device(device)
        tokenizer = AutoTokenizer.from_pretrained(model_path)
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        if dtype is None:
            dtype = torch.float32 if dev.type == "cpu" else torch.bfloat16
        model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype).to(dev).eval()
        return cls(model, tokenizer, dev)

    # --- the engine's TextCodec ------------------------------------------------------------------------
    @property
    def eos_token_id(self) -> int:
        return int(self.tokenizer.eos_token_id)

    @property
    def pad_token_id(self) -> int:
        return int(self.tokenizer.pad_token_id)

    @property
    def max_positions(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", 2048))

    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def decode(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids, skip_special_tokens=True)

    # --- building the engine -------------------------------------------------------------------------------
    def make_runner(self, probe_layer: int | None = None) -> ModelRunner:
        return ModelRunner(self.model, KVStore(self.device), self.pad_token_id, probe_layer=probe_layer)

    def make_engine(
        self,
        scheduler: Scheduler,
        *,
        max_new_tokens: int = 384,
        clock: Callable[[], float] | None = None,
        refiner: LengthRefiner | None = None,
        speculative_tokens: int = 0,
        cost_correction: bool = True,
    ) -> Engine:
        runner = self.make_runner(probe_layer=refiner.layer if refiner is not None else None)
        kwargs = {"clock": clock} if clock is not None else {}
        return Engine(runner, self, scheduler, max_new_tokens=max_new_tokens, refiner=refiner,
                      speculative_tokens=speculative_tokens, cost_correction=cost_correction, **kwargs)
