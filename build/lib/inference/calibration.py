"""Measure prefill, decode and swap times of the serving model on this machine and fit the cost model.

    prefill: batches of fresh prompts (lengths n_i)            -> alpha1, alpha2, per-iteration overhead
    decode:  one step of b requests at contexts c_i             -> gamma1, gamma2
    swap:    one request's cache device -> host and back (n)   -> beta (seconds per token, each way)

Every sample is the fastest of `repeats` runs (on a shared machine interference only ever adds time) through the real model runner and KV store, so what is fitted
is what the engine pays. The result is stored as JSON (`save_cost_model`) for the scheduler to load.
"""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Callable
from pathlib import Path

import torch

from inference.backends.hf import HFBackend
from inference.model_runner import ModelRunner, RowInput
from scheduler.cost import PRESETS, CostModel, fit_cost_model

PREFILL_SHAPES = [[16], [32], [64], [128], [256], [16] * 4, [64] * 4, [32, 64, 128, 200], [128] * 8]
DECODE_SHAPES = [(1, 32), (1, 256), (4, 64), (8, 128), (16, 64), (16, 256), (32, 128), (32, 32)]
SWAP_TOKENS = [32, 128, 512]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _best_time(fn: Callable[[], None], device: torch.device, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return min(times)


def _random_ids(backend: HFBackend, n: int, gen: torch.Generator) -> list[int]:
    vocab = int(backend.model.config.vocab_size)
    return torch.randint(3, vocab, (n,), generator=gen).tolist()


def measure(backend: HFBackend, repeats: int = 5, progress: Callable[[str], None] | None = None) -> dict:
    gen = torch.Generator().manual_seed(0)
    max_len = backend.max_positions - 2
    prefill, decode, swap = [], [], []
    counter = iter(range(10**9))

    for shape in PREFILL_SHAPES:
        shape = [min(n, max_len) for n in shape]
        prompts = [_random_ids(backend, n, gen) for n in shape]

        def run_prefill(prompts=prompts) -> None:
            runner = backend.make_runner()
            runner.step([RowInput(f"p{next(counter)}", ids) for ids in prompts])

        prefill.append((shape, _best_time(run_prefill, backend.device, repeats)))
        if progress:
            progress(f"prefill {shape}: {prefill[-1][1] * 1e3:.1f} ms")

    for batch, context in DECODE_SHAPES:
        context = min(context, max_len - repeats - 1)
        runner: ModelRunner = backend.make_runner()
        ids = [f"d{i}" for i in range(batch)]
        outs = runner.step([RowInput(rid, _random_ids(backend, context, gen)) for rid in ids])
        last = {o.request_id: o.next_token_id for o in outs}

        def run_decode(runner=runner, ids=ids, last=last) -> None:
            for o in runner.step([RowInput(rid, [last[rid]]) for rid in ids]):
                last[o.request_id] = o.next_token_id

        seconds = _best_time(run_decode, backend.device, repeats)
        decode.append(([context + 1] * batch, seconds))
        if progress:
            progress(f"decode b={batch} c={context}: {seconds * 1e3:.1f} ms")

    for n in SWAP_TOKENS:
        n = min(n, max_len)
        runner = backend.make_runner()
        runner.step([RowInput("s", _random_ids(backend, n, gen))])
        runner.release(["s"])
        store = runner.store

        def round_trip(store=store) -> None:
            store.swap_out("s")
            store.swap_in("s")

        seconds = _best_time(round_trip, backend.device, repeats) / 2
        swap.append((n, seconds))
        if progress:
            progress(f"swap {n} tokens: {seconds * 1e3:.2f} ms each way")
    return {"prefill": prefill, "decode": decode, "swap": swap}


def kv_bytes_per_token(backend: HFBackend) -> int:
    cfg = backend.model.config
    heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    dtype_bytes = next(backend.model.parameters()).element_size()
    return cfg.num_hidden_layers * 2 * heads * head_dim * dtype_bytes


def kv_budget_bytes(backend: HFBackend, fraction: float = 0.25) -> int:
    """KV memory the engine may use: a fraction of free GPU memory, or of available host memory on CPU."""
    if backend.device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(backend.device)
        return int(free * fraction)
    import psutil

    return int(psutil.virtual_memory().available * fraction)


def calibrate(backend: HFBackend, repeats: int = 5, progress: Callable[[str], None] | None = None) -> dict:
    samples = measure(backend, repeats=repeats, progress=progress)
    fitted = fit_cost_model(samples["prefill"], samples["decode"], samples["swap"], base=PRESETS["a100-4b"])
    capacity = kv_budget_bytes(backend) // kv_bytes_per_token(backend)
    cost = CostModel.from_dict({**fitted.to_dict(), "kv_capacity_tokens": int(capacity), "name": "calibrated"})
    residuals = []
    for lengths, seconds in samples["prefill"]:
        predicted = sum(cost.prefill_s(n) for n in lengths) + cost.iteration_overhead_s
        residuals.append(("prefill", lengths, seconds, predicted))
    for contexts, seconds in samples["decode"]:
        predicted = cost.decode_step_s(sum(contexts)) + cost.iteration_overhead_s
        residuals.append(("decode", contexts, seconds, predicted))
    return {
        "cost_model": cost.to_dict(),
        "device": str(backend.device),
        "machine": platform.node(),
        "torch_threads": torch.get_num_threads(),
        "model_parameters": sum(p.numel() for p in backend.model.parameters()),
        "kv_bytes_per_token": kv_bytes_per_token(backend),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "samples": {k: [[x, s] for x, s in v] for k, v in samples.items()},
        "fit": [
            {"kind": kind, "shape": _describe(x), "measured_ms": round(s * 1e3, 3), "predicted_ms": round(p * 1e3, 3)}
            for kind, x, s, p in residuals
        ],
    }


def _describe(lengths: list[int]) -> str:
    return f"{len(lengths)}x{lengths[0]}" if len(set(lengths)) == 1 else "+".join(map(str, lengths))


def save_cost_model(result: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2))


def load_cost_model(path: Path, fallback: str = "a100-4b") -> CostModel:
    """The calibrated cost model stored at `path`, or a preset when none has been measured yet."""
    try:
        return CostModel.from_dict(json.loads(Path(path).read_text())["cost_model"])
    except (OSError, KeyError, ValueError):
        return PRESETS[fallback]
