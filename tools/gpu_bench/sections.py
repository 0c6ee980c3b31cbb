"""The bench's four measurements, each a function of a backend and its size: throughput, the semantic burst,
the costs (calibration and swap overlap), and exactness after preemption. Times are wall-clock with the device
synchronised; every figure is what the engine itself pays.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from inference.backends.hf import HFBackend
from inference.calibration import calibrate, kv_bytes_per_token
from scheduler.config import SchedulerConfig
from scheduler.cost import PRESETS, CostModel
from scheduler.decision import PreemptionMode
from scheduler.metrics import percentile
from scheduler.policies import make_scheduler
from tools.engine_bench import run_engine, run_sequential
from tools.gpu_bench.scripted import ScriptedScheduler


@dataclass(frozen=True)
class Call:
    id: str
    level: int  # as triage predicted it: what the scheduler orders by
    predicted_output_tokens: int
    prompt_ids: tuple[int, ...]


def load_calls(path: Path, backend: HFBackend, limit: int | None = None) -> list[Call]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [Call(r["id"], int(r["level"]), int(r["predicted_output_tokens"]), tuple(backend.encode(r["prompt"])))
            for r in rows[:limit]]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ----------------------------------------------------------------------------------------------- throughput
def throughput(backend: HFBackend, calls: Sequence[Call], concurrency: Sequence[int], max_new: int,
               sequential_sample: int) -> list[dict]:
    """Tokens/s of our engine with n calls at once, against sequential ``generate()`` (its rate does not depend
    on n: measured once on ``sequential_sample`` calls)."""
    prompts = [list(c.prompt_ids) for c in calls]
    seq_tokens, seq_s = run_sequential(backend, prompts[:sequential_sample], max_new)
    sequential = seq_tokens / seq_s
    rows = []
    for n in concurrency:
        batch = [prompts[i % len(prompts)] for i in range(n)]
        _sync(backend.device)
        tokens, seconds = run_engine(backend, batch, max_new)
        _sync(backend.device)
        rows.append({"concurrency": n, "engine_tok_s": round(tokens / seconds, 1),
                     "sequential_tok_s": round(sequential, 1), "ratio": round(tokens / seconds / sequential, 2)})
    return rows


# ----------------------------------------------------------------------------------------------- the burst
def burst(backend: HFBackend, calls: Sequence[Call], policy: str, *, batch_size: int, kv_capacity_blocks: int,
          max_new_cap: int, cost: CostModel) -> dict:
    """Every call at once; per predicted level the TTFT p50/p99, the tokens/s, the preemptions by mode."""
    config = SchedulerConfig(policy=policy, batch_size=batch_size, kv_capacity_blocks=kv_capacity_blocks)
    engine = backend.make_engine(make_scheduler(config, cost), max_new_tokens=max_new_cap)
    start = time.perf_counter()
    for c in calls:
        engine.add_request(c.id, list(c.prompt_ids), level=c.level, predicted_output_tokens=c.predicted_output_tokens,
                           max_new_tokens=min(c.predicted_output_tokens, max_new_cap))
    first: dict[str, float] = {}
    tokens = 0
    while engine.has_work():
        result = engine.step()
        now = time.perf_counter() - start
        for event in result.tokens:
            first.setdefault(event.request_id, now)
        tokens += len(result.tokens)
    _sync(backend.device)
    elapsed = time.perf_counter() - start
    by_level: dict[str, dict] = {}
    for level in sorted({c.level for c in calls}):
        ttft = [first[c.id] for c in calls if c.level == level and c.id in first]
        by_level[str(level)] = {"calls": len(ttft), "ttft_p50_s": round(percentile(ttft, 50), 3),
                                "ttft_p99_s": round(percentile(ttft, 99), 3)}
    return {"policy": policy, "calls": len(calls), "tokens": tokens, "seconds": round(elapsed, 2),
            "tokens_per_s": round(tokens / elapsed, 1), "by_level": by_level,
            "preemptions": dict(Counter({str(k): v for k, v in engine.preemptions_by_mode.items()}))}


def kv_blocks_that_bind(backend: HFBackend, calls: Sequence[Call], batch_size: int, max_new_cap: int,
                        block_size: int = 16, share: float = 0.5) -> int:
    """A KV budget of ``share`` of what a full batch of the longest calls needs: memory binds before slots."""
    need = sorted((len(c.prompt_ids) + min(c.predicted_output_tokens, max_new_cap) for c in calls), reverse=True)
    tokens = sum(need[:batch_size])
    return max(1, int(share * tokens) // block_size)


# ----------------------------------------------------------------------------------------------- costs
def costs(backend: HFBackend, repeats: int, progress: Callable[[str], None] = lambda _: None) -> dict:
    """The cost model fitted on this device, beside the simulator's A100 presets."""
    measured = calibrate(backend, repeats=repeats, progress=progress)
    presets = {name: PRESETS[name].to_dict() for name in ("a100-4b", "a100-7b")}
    return {"calibrated": measured["cost_model"], "fit": measured["fit"], "presets": presets,
            "kv_bytes_per_token": kv_bytes_per_token(backend), "parameters": measured["model_parameters"]}


def swap_overlap(backend: HFBackend, tokens: int, batch: int, context: int, repeats: int) -> dict:
    """A swap of ``tokens`` tokens of KV each way (pinned host memory, non-blocking, as ``kv_store`` copies) and a
    forward pass of ``batch`` x ``context`` tokens, alone and together: with the copy on the default stream
    (today's engine) and on a stream of its own. overlap = time hidden / the shorter of the two (1: fully)."""
    device = backend.device
    if device.type != "cuda":
        return {"device": str(device), "note": "no copy streams on a CPU"}
    cfg = backend.model.config
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    kv = torch.randn(cfg.num_hidden_layers, 2, cfg.num_key_value_heads, tokens, head_dim, device=device,
                     dtype=next(backend.model.parameters()).dtype)
    host = torch.empty(kv.shape, dtype=kv.dtype, device="cpu", pin_memory=True)
    ids = torch.randint(3, cfg.vocab_size, (batch, context), device=device)
    stream = torch.cuda.Stream(device)

    def compute() -> None:
        with torch.inference_mode():
            backend.model(input_ids=ids, use_cache=False)

    def copier(direction: str, own_stream: bool) -> Callable[[], None]:
        def copy() -> None:
            if own_stream:
                stream.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(stream if own_stream else torch.cuda.current_stream(device)):
                (host.copy_(kv, non_blocking=True) if direction == "out" else kv.copy_(host, non_blocking=True))
        return copy

    def best(*fns: Callable[[], None]) -> float:
        times = []
        for _ in range(repeats):
            torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            for fn in fns:
                fn()
            torch.cuda.synchronize(device)
            times.append(time.perf_counter() - t0)
        return min(times)

    compute_s = best(compute)
    out: dict = {"device": str(device), "kv_tokens": tokens, "kv_mib": round(kv.numel() * kv.element_size() / 2**20, 1),
                 "compute_ms": round(compute_s * 1e3, 3)}
    for direction in ("out", "in"):
        copy_s = best(copier(direction, False))
        shorter = min(compute_s, copy_s)
        out[f"swap_{direction}_ms"] = round(copy_s * 1e3, 3)
        for name, own in (("default_stream", False), ("copy_stream", True)):
            together = best(copier(direction, own), compute)
            out[f"swap_{direction}_with_compute_{name}_ms"] = round(together * 1e3, 3)
            out[f"swap_{direction}_overlap_{name}"] = (
                round(max(0.0, compute_s + copy_s - together) / shorter, 3) if shorter else 0.0)
    return out


# ----------------------------------------------------------------------------------------------- exactness
def exactness(backend: HFBackend, calls: Sequence[Call], max_new: int) -> dict:
    """Greedy outputs of three calls preempted mid-answer (swap, recompute, partial keep) against their solo
    ``generate()``; True per mode when every token matches."""
    prompts = [list(c.prompt_ids) for c in calls[:3]]
    solo = [solo_greedy(backend, p, max_new) for p in prompts]
    out = {}
    for mode, kept in ((PreemptionMode.SWAP, None), (PreemptionMode.DROP, 0), (PreemptionMode.PARTIAL, 8)):
        # mid-answer: a quarter, half and three quarters of the way through (the prefill is iteration 1)
        script = {max(2, max_new // 4): [("r0", mode, kept)], max(3, max_new // 2): [("r1", mode, kept)],
                  max(4, 3 * max_new // 4): [("r2", mode, kept)]}
        engine = backend.make_engine(ScriptedScheduler(script), max_new_tokens=max_new, clock=lambda: 0.0)
        for i, p in enumerate(prompts):
            engine.add_request(f"r{i}", p, level=2, predicted_output_tokens=max_new)
        done = engine.run_until_idle()
        name = {PreemptionMode.SWAP: "swap", PreemptionMode.DROP: "recompute", PreemptionMode.PARTIAL: "partial"}[mode]
        out[name] = all(done[f"r{i}"].token_ids == solo[i] for i in range(len(prompts)))
    return out


def solo_greedy(backend: HFBackend, prompt_ids: list[int], max_new: int) -> tuple[int, ...]:
    ids = torch.tensor([prompt_ids], device=backend.device)
    with torch.inference_mode():
        out = backend.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new,
                                     do_sample=False, eos_token_id=backend.eos_token_id,
                                     pad_token_id=backend.pad_token_id)
    return tuple(out[0, len(prompt_ids):].tolist())
