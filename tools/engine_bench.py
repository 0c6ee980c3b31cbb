"""Throughput of our engine against sequential `model.generate` (and transformers' ContinuousBatchingManager).

    python -m tools.engine_bench [--model PATH] [--concurrency 1,8,32] [--max-new 64] [--with-cb] [--json]
    python -m tools.engine_bench --profile [--concurrency 32] [--max-new 128]   # where the engine's time goes

Each row runs the same N call prompts three ways and reports generated tokens per second:
`sequential` (one `generate()` per request, one after another), `engine` (all N submitted at once to our
engine under the FCFS policy with batch size N), `cb` (transformers' `generate_batch`, optional).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

from inference.backends.hf import HFBackend
from scheduler.config import SchedulerConfig
from scheduler.cost import PRESETS
from scheduler.policies import make_scheduler


def bench_prompts(backend: HFBackend, n: int) -> list[list[int]]:
    # imported here: the corpus reads calls with spaCy, which the GPU bench (``tools.gpu_bench``) runs without
    from training.guidance_corpus import example_records, record_prompt

    records = example_records()
    return [backend.encode(record_prompt(records[(i * 7) % len(records)])) for i in range(n)]


def run_sequential(backend: HFBackend, prompts: list[list[int]], max_new: int) -> tuple[int, float]:
    tokens, started = 0, time.perf_counter()
    for ids in prompts:
        x = torch.tensor([ids], device=backend.device)
        with torch.inference_mode():
            out = backend.model.generate(
                x, attention_mask=torch.ones_like(x), max_new_tokens=max_new, do_sample=False,
                eos_token_id=backend.eos_token_id, pad_token_id=backend.pad_token_id,
            )
        tokens += out.shape[1] - len(ids)
    return tokens, time.perf_counter() - started


def run_engine(backend: HFBackend, prompts: list[list[int]], max_new: int, policy: str = "fcfs") -> tuple[int, float]:
    config = SchedulerConfig(policy=policy, batch_size=max(1, len(prompts)), kv_capacity_blocks=1 << 16)
    engine = backend.make_engine(make_scheduler(config, PRESETS["a100-4b"]), max_new_tokens=max_new)
    started = time.perf_counter()
    for i, ids in enumerate(prompts):
        engine.add_request(f"b{i}", ids, level=3, predicted_output_tokens=max_new)
    done = engine.run_until_idle()
    return sum(e.output_tokens for e in done.values()), time.perf_counter() - started


def run_cb(backend: HFBackend, prompts: list[list[int]], max_new: int) -> tuple[int, float]:
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    gen = GenerationConfig(
        max_new_tokens=max_new, do_sample=False, eos_token_id=backend.eos_token_id, pad_token_id=backend.pad_token_id
    )
    cb = ContinuousBatchingConfig(num_blocks=256, max_batch_tokens=512, max_memory_percent=0.05)
    started = time.perf_counter()
    out = backend.model.generate_batch(prompts, generation_config=gen, continuous_batching_config=cb, warmup=False)
    elapsed = time.perf_counter() - started
    return sum(len(o.generated_tokens) for o in out.values()), elapsed


def profile_engine(backend: HFBackend, n: int, max_new: int, rows: int = 12) -> str:
    """One engine run of n prompts under torch.profiler: the operators by self CPU time."""
    from torch.profiler import ProfilerActivity, profile

    prompts = bench_prompts(backend, n)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run_engine(backend, prompts, max_new)
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows, max_name_column_width=40)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=os.environ.get("INFERENCE_MODEL", "models/guidance-llm"))
    parser.add_argument("--device", default=None)
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--max-new", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--with-cb", action="store_true", help="also run transformers' ContinuousBatchingManager")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--profile", action="store_true", help="profile the engine at each concurrency instead")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    backend = HFBackend.load(args.model, device=args.device)
    run_engine(backend, bench_prompts(backend, 2), 8)  # warm-up
    if args.profile:
        for n in [int(x) for x in args.concurrency.split(",")]:
            print(f"engine, {n} concurrent, {args.max_new} new tokens\n{profile_engine(backend, n, args.max_new)}")
        return []
    rows = []
    for n in [int(x) for x in args.concurrency.split(",")]:
        prompts = bench_prompts(backend, n)
        row = {"concurrency": n, "device": str(backend.device)}
        for name, fn in (("sequential", run_sequential), ("engine", run_engine)) + (
            (("cb", run_cb),) if args.with_cb else ()
        ):
            tokens, seconds = fn(backend, prompts, args.max_new)
            row[f"{name}_tokens"] = tokens
            row[f"{name}_s"] = round(seconds, 3)
            row[f"{name}_tok_s"] = round(tokens / seconds, 1)
        row["engine_vs_sequential"] = round(row["engine_tok_s"] / row["sequential_tok_s"], 2)
        rows.append(row)
        if not args.json:
            print(
                f"n={n:3d}  sequential {row['sequential_tok_s']:8.1f} tok/s   engine {row['engine_tok_s']:8.1f} tok/s"
                f"  ({row['engine_vs_sequential']:.2f}x)"
                + (f"   cb {row['cb_tok_s']:8.1f} tok/s" if args.with_cb else ""),
                flush=True,
            )
    if args.json:
        print(json.dumps(rows, indent=2))
    return rows


if __name__ == "__main__":
    main()
