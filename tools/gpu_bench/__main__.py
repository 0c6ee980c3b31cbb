"""``python -m tools.gpu_bench --device cuda|cpu [--tiny] --out DIR [--sections ...]`` (see the package's
docstring). Writes DIR/gpu_bench.json after every section, so a run cut short keeps what it measured."""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from scheduler.cost import PRESETS, CostModel
from tools.gpu_bench import model as bench_model
from tools.gpu_bench import sections

SECTIONS = ("throughput", "burst", "costs", "exactness")


@dataclass(frozen=True)
class Size:
    """How much each section does: a GPU run fits in 8 minutes on an H100, a tiny one in seconds on a CPU."""

    shape: bench_model.Shape
    dtype: str
    concurrency: tuple[int, ...]
    throughput_new_tokens: int
    sequential_sample: int
    burst_calls: int
    burst_batch: int
    burst_new_cap: int
    calibration_repeats: int
    swap_tokens: int
    exactness_new_tokens: int


LARGE = Size(bench_model.LARGE, "bfloat16", (1, 8, 32, 64), 64, 4, 200, 32, 128, 3, 2048, 32)
TINY = Size(bench_model.TINY, "float32", (1, 4), 8, 2, 24, 4, 12, 1, 64, 8)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--tiny", action="store_true", help="a tiny model and a few calls (CI, a dry run)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--sections", default=",".join(SECTIONS))
    parser.add_argument("--prepared", type=Path, default=bench_model.PREPARED, help="burst.jsonl, tokenizer.json")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    size = TINY if args.tiny else LARGE
    device = torch.device(args.device)
    wanted = [s for s in args.sections.split(",") if s]
    unknown = set(wanted) - set(SECTIONS)
    if unknown:
        parser.error(f"--sections: unknown {sorted(unknown)} (known: {', '.join(SECTIONS)})")
    args.out.mkdir(parents=True, exist_ok=True)

    started = time.perf_counter()
    tokenizer = bench_model.load_tokenizer(args.prepared)
    backend = bench_model.build(size.shape, device, getattr(torch, size.dtype), tokenizer)
    calls = sections.load_calls(args.prepared / "burst.jsonl", backend, size.burst_calls)
    report: dict = {
        "device": _device_name(device), "torch": torch.__version__, "python": sys.version.split()[0],
        "machine": platform.node(), "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "size": {**asdict(size), "tiny": args.tiny}, "parameters": bench_model.parameters(backend),
        "model_build_s": round(time.perf_counter() - started, 1),
    }

    def save() -> None:
        report["elapsed_s"] = round(time.perf_counter() - started, 1)
        (args.out / "gpu_bench.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
        (args.out / "gpu_bench.txt").write_text(render(report))

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - started:7.1f} s] {message}", flush=True)

    save()
    cost = PRESETS["a100-4b"]
    if "costs" in wanted:
        log("costs: calibrating prefill, decode and swap")
        report["costs"] = sections.costs(backend, size.calibration_repeats)
        report["costs"]["swap_overlap"] = sections.swap_overlap(backend, size.swap_tokens, batch=8, context=256,
                                                                repeats=size.calibration_repeats + 2)
        cost = CostModel.from_dict(report["costs"]["calibrated"])
        save()
    if "throughput" in wanted:
        log(f"throughput at {size.concurrency} concurrent")
        report["throughput"] = sections.throughput(backend, calls, size.concurrency, size.throughput_new_tokens,
                                                   size.sequential_sample)
        save()
    if "burst" in wanted:
        blocks = sections.kv_blocks_that_bind(backend, calls, size.burst_batch, size.burst_new_cap)
        report["burst"] = {"kv_capacity_blocks": blocks, "batch_size": size.burst_batch, "runs": []}
        for policy in ("fcfs", "semantic"):
            log(f"burst of {len(calls)} calls, {policy}, {blocks} KV blocks")
            report["burst"]["runs"].append(sections.burst(
                backend, calls, policy, batch_size=size.burst_batch, kv_capacity_blocks=blocks,
                max_new_cap=size.burst_new_cap, cost=cost))
            save()
    if "exactness" in wanted:
        log("exactness after swap, recompute and partial keep")
        report["exactness"] = {size.dtype: sections.exactness(backend, calls, size.exactness_new_tokens)}
        if size.dtype != "float32":
            del backend
            if device.type == "cuda":
                torch.cuda.empty_cache()
            fp32 = bench_model.build(size.shape, device, torch.float32, tokenizer)
            report["exactness"]["float32"] = sections.exactness(fp32, calls, size.exactness_new_tokens)
        save()
    log(f"done: {args.out / 'gpu_bench.json'}")
    return report


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def render(report: dict) -> str:
    """The short table: one line per measurement."""
    lines = [f"device {report['device']}, {report['parameters'] / 1e6:.1f}M parameters "
             f"({report['size']['dtype']}), {report.get('elapsed_s', 0)} s"]
    for row in report.get("throughput", []):
        lines.append(f"throughput n={row['concurrency']:>3}: engine {row['engine_tok_s']:9.1f} tok/s, sequential "
                     f"{row['sequential_tok_s']:8.1f} tok/s, {row['ratio']:.2f}x")
    runs = {r["policy"]: r for r in report.get("burst", {}).get("runs", [])}
    for policy, run in runs.items():
        one = run["by_level"].get("1", {})
        lines.append(f"burst {policy:>8}: ESI-1 TTFT p50 {one.get('ttft_p50_s')} s p99 {one.get('ttft_p99_s')} s, "
                     f"{run['tokens_per_s']} tok/s, preemptions {run['preemptions']}")
    if {"fcfs", "semantic"} <= runs.keys():
        fcfs, semantic = runs["fcfs"], runs["semantic"]
        a, b = fcfs["by_level"].get("1", {}).get("ttft_p50_s"), semantic["by_level"].get("1", {}).get("ttft_p50_s")
        if a and b:
            lines.append(f"burst: ESI-1 TTFT p50 FCFS / semantic {a / b:.2f}x, throughput semantic / FCFS "
                         f"{semantic['tokens_per_s'] / fcfs['tokens_per_s']:.3f}")
    if "costs" in report:
        c = report["costs"]["calibrated"]
        lines.append("costs: " + ", ".join(f"{k} {c[k]:.3g}" for k in ("alpha1", "alpha2", "beta_s_per_token", "gamma1", "gamma2")
                                          if k in c))
        overlap = report["costs"].get("swap_overlap", {})
        for direction in ("out", "in"):
            if f"swap_{direction}_overlap_default_stream" in overlap:
                lines.append(f"swap-{direction} hidden under compute: "
                             f"{overlap[f'swap_{direction}_overlap_default_stream']} on the default stream, "
                             f"{overlap[f'swap_{direction}_overlap_copy_stream']} on a copy stream (1 = fully)")
    for dtype, modes in report.get("exactness", {}).items():
        lines.append(f"exactness {dtype}: " + ", ".join(f"{m} {'exact' if ok else 'DIFFERS'}" for m, ok in modes.items()))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
