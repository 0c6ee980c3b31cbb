"""Train the bundled guidance model: a BPE tokenizer and a small Llama-architecture causal LM, from scratch.

Deterministic for a given config and corpus (seeded torch and shuffles); saves with `save_pretrained`
so `AutoModelForCausalLM.from_pretrained(path)` / `AutoTokenizer.from_pretrained(path)` load it offline.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from tqdm import tqdm
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

PAD, BOS, EOS = "<pad>", "<s>", "</s>"


@dataclass(frozen=True)
class LLMTrainingConfig:
    vocab_size: int = 2000
    hidden_size: int = 256
    num_layers: int = 4
    num_heads: int = 4
    intermediate_size: int = 688
    max_positions: int = 1024
    steps: int = 600
    batch_size: int = 16
    lr: float = 3e-3
    warmup_steps: int = 30
    seed: int = 1234
    threads: int = 2
    split_suffixes: bool = False  # see SUFFIX_SPLIT
    switched_share: float = 0.0  # share of calls also taught another protocol's plan (corpus.training_pairs)


# ~2.5M parameters, trained on the written corpus' calls (training.guidance_corpus): it reads out the protocol
# text its prompt carries.
FULL_CONFIG = LLMTrainingConfig(hidden_size=192, intermediate_size=512, steps=1000, split_suffixes=True,
                                switched_share=0.25)
# Trains in about two minutes on 2 busy cores, on a few calls per protocol, and reads all of them out.
TINY_CONFIG = LLMTrainingConfig(
    vocab_size=1500, hidden_size=128, num_layers=2, num_heads=2, intermediate_size=384,
    steps=420, batch_size=16, lr=3e-3, warmup_steps=20,
)


# Inflections split from their stem before BPE: "choked", "choking" and "chokes" share the token "chok", so a
# keyword the model learnt in one form is recognised in another.
SUFFIX_SPLIT = r"(?<=[a-z]{3})(?:ing|ed|s)\b"


def train_tokenizer(texts: list[str], vocab_size: int, split_suffixes: bool = False) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE(unk_token=None))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    if split_suffixes:
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(SUFFIX_SPLIT), behavior="isolated"), byte_level]
        )
    else:
        tok.pre_tokenizer = byte_level
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD, BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    # generation batches pad on the left (saved with the tokenizer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=PAD, bos_token=BOS, eos_token=EOS, padding_side="left")
    return fast


def _encode_pairs(tokenizer: PreTrainedTokenizerFast, pairs: list[tuple[str, str]], max_len: int):
    """Token ids of `prompt + " " + guidance + EOS`, with labels only on the guidance (the prompt is given)."""
    examples = []
    for prompt, guidance in pairs:
        p_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        g_ids = tokenizer(" " + guidance, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        ids = (p_ids + g_ids)[:max_len]
        labels = ([-100] * len(p_ids) + g_ids)[:max_len]
        examples.append((ids, labels))
    return examples


def _collate(batch, pad_id: int):
    width = max(len(ids) for ids, _ in batch)
    input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for i, (ids, lab) in enumerate(batch):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        labels[i, : len(lab)] = torch.tensor(lab)
        mask[i, : len(ids)] = 1
    return input_ids, mask, labels


def _length_buckets(examples: list, batch_size: int, rng: random.Random) -> list[list]:
    """One epoch of batches of similar length (little padding), in a seeded random order.

    Examples are shuffled, then sorted by length within windows of 50 batches, cut into batches, and the
    batches shuffled: each batch is near-uniform in length while an epoch still mixes every length.
    """
    order = list(range(len(examples)))
    rng.shuffle(order)
    window = batch_size * 50
    batches = []
    for start in range(0, len(order), window):
        chunk = sorted(order[start : start + window], key=lambda i: len(examples[i][0]))
        batches += [[examples[i] for i in chunk[j : j + batch_size]] for j in range(0, len(chunk), batch_size)]
    rng.shuffle(batches)
    return batches


def train_guidance_model(
    pairs: list[tuple[str, str]],
    out_dir: Path,
    config: LLMTrainingConfig = FULL_CONFIG,
    progress: bool = True,
    device: str = "cpu",
) -> dict:
    """Train tokenizer + model on (prompt, guidance) pairs and save both to `out_dir`. Returns training stats.

    Deterministic for a given device (seeded); a CUDA build gives a different, equally trained model."""
    torch.set_num_threads(min(config.threads, torch.get_num_threads()))
    torch.manual_seed(config.seed)
    rng = random.Random(config.seed)
    started = time.perf_counter()

    texts = sorted({p for p, _ in pairs} | {" " + g for _, g in pairs})
    tokenizer = train_tokenizer(texts, config.vocab_size, config.split_suffixes)
    model_config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_heads,
        max_position_embeddings=config.max_positions,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(model_config).to(device)
    examples = _encode_pairs(tokenizer, pairs, config.max_positions)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.01)

    def lr_at(step: int) -> float:
        if step < config.warmup_steps:
            return (step + 1) / config.warmup_steps
        progress_frac = (step - config.warmup_steps) / max(1, config.steps - config.warmup_steps)
        return 0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * progress_frac))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_at)
    batches = _length_buckets(examples, config.batch_size, rng)
    model.train()
    loss_value = 0.0  # exponential moving average
    bar = tqdm(range(config.steps), desc="guidance LLM", disable=not progress, unit="step")
    for step in bar:
        if not batches:
            batches = _length_buckets(examples, config.batch_size, rng)
        input_ids, mask, labels = (t.to(device) for t in _collate(batches.pop(), tokenizer.pad_token_id))
        loss = model(input_ids=input_ids, attention_mask=mask, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        loss_value = 0.9 * loss_value + 0.1 * loss.item() if step else loss.item()
        bar.set_postfix(loss=f"{loss_value:.3f}")

    model.eval().to("cpu")
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    stats = {
        "config": asdict(config),
        "parameters": sum(p.numel() for p in model.parameters()),
        "examples": len(examples),
        "final_loss": loss_value,
        "train_s": round(time.perf_counter() - started, 1),
        "device": str(device),
    }
    (out_dir / "training.json").write_text(json.dumps(stats, indent=2))
    return stats
