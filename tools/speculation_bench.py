"""Speculative decoding on our engine: guidance tokens/s and ESI-1 time to first token, with and without.

    python -m tools.speculation_bench [--model PATH] [--concurrency 1,16] [--draft 8] [--repeats 3]
                                      [--burst 200] [--free] [--json] [--write-prompts FILE]

Every row runs the same served guidance requests (a written call's prompt, its protocol plan as the strict
read-out, as the worker runs them) through the engine twice per repeat, alternately without speculation and
with ``--draft`` tokens: tokens/s (median of the repeats and the ratio), the draft acceptance rate, and whether
every output is token for token the same. ``--free`` drops the read-out (prompt lookup alone). ``--burst N``
then submits N calls at once (levels and protocols of the written calls, the semantic policy) and reports the
ESI-1 calls' time to first token, p50 and p90, and the burst's makespan, without and with speculation.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch

from inference.backends.hf import HFBackend
from scheduler.config import SchedulerConfig
from scheduler.cost import PRESETS
from scheduler.policies import make_scheduler


def _requests(n: int, free: bool) -> list[dict]:
    from judgment.protocols import load_library
    from training.guidance_corpus import load_written, record_plan, record_prompt

    library = load_library()
    records = load_written()
    chosen = [records[(i * 7) % len(records)] for i in range(n)]
    return [{"prompt": record_prompt(r), "level": int(r["esi"]),
             "read_out": None if free else record_plan(r, library).sentences} for r in chosen]


def _run(backend: HFBackend, requests: list[dict], draft: int, policy: str, max_new: int) -> dict:
    config = SchedulerConfig(policy=policy, batch_size=min(16, len(requests)), kv_capacity_blocks=1 << 16)
    engine = backend.make_engine(make_scheduler(config, PRESETS["a100-4b"]), max_new_tokens=max_new,
                                 speculative_tokens=draft)
    started = time.perf_counter()
    for i, req in enumerate(requests):
        engine.add_request(f"q{i}", req["prompt"], level=req["level"], predicted_output_tokens=64,
                           read_out=req["read_out"])
    first: dict[str, float] = {}
    done = {}
    while engine.has_work():
        step = engine.step()
        now = time.perf_counter() - started
        for t in step.tokens:
            first.setdefault(t.request_id, now)
        for f in step.finished:
            done[f.request_id] = f
    seconds = time.perf_counter() - started
    tokens = sum(f.output_tokens for f in done.values())
    esi1 = sorted(first[f"q{i}"] for i, r in enumerate(requests) if r["level"] == 1 and f"q{i}" in first)
    return {"tokens": tokens, "seconds": seconds, "tok_s": tokens / seconds, "iterations": engine.iterations,
            "outputs": {rid: f.token_ids for rid, f in done.items()},
            "acceptance": engine.accepted_tokens / engine.drafted_tokens if engine.drafted_tokens else None,
            "esi1_ttft": esi1}


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    return values[min(len(values) - 1, int(q * len(values)))]


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=os.environ.get("INFERENCE_MODEL", "models/guidance-llm"))
    parser.add_argument("--device", default=None)
    parser.add_argument("--concurrency", default="1,16")
    parser.add_argument("--draft", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-new", type=int, default=384)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--burst", type=int, default=0)
    parser.add_argument("--free", action="store_true", help="no read-out: prompt lookup alone")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--write-prompts", metavar="FILE", help="only write the prompts (JSON) for the vLLM bench")
    args = parser.parse_args(argv)
    if args.write_prompts:
        sizes = [int(x) for x in args.concurrency.split(",")]
        prompts = [r["prompt"] for r in _requests(max(sizes), free=True)]
        with open(args.write_prompts, "w", encoding="utf-8") as out:
            json.dump(prompts, out)
        return []
    torch.set_num_threads(args.threads)
    backend = HFBackend.load(args.model, device=args.device)
    _run(backend, _requests(2, args.free), args.draft, "fcfs", 16)  # warm-up
    rows = []
    for n in [int(x) for x in args.concurrency.split(",")]:
        requests = _requests(n, args.free)
        runs: dict[int, list[dict]] = {0: [], args.draft: []}
        for _ in range(args.repeats):
            for draft in runs:
                runs[draft].append(_run(backend, requests, draft, "fcfs", args.max_new))
        plain, fast = runs[0], runs[args.draft]
        row = {"concurrency": n, "draft": args.draft, "read_out": not args.free,
               "plain_tok_s": round(statistics.median(r["tok_s"] for r in plain), 1),
               "speculative_tok_s": round(statistics.median(r["tok_s"] for r in fast), 1),
               "acceptance": round(fast[0]["acceptance"] or 0.0, 3),
               "iterations": (plain[0]["iterations"], fast[0]["iterations"]),
               "identical": all(f["outputs"] == plain[0]["outputs"] for f in fast)}
        row["ratio"] = round(row["speculative_tok_s"] / row["plain_tok_s"], 2)
        rows.append(row)
        if not args.json:
            print(f"n={n:3d} draft {args.draft}: {row['plain_tok_s']:8.1f} -> {row['speculative_tok_s']:8.1f} tok/s "
                  f"({row['ratio']:.2f}x), acceptance {row['acceptance']:.3f}, iterations {row['iterations']}, "
                  f"identical {row['identical']}", flush=True)
    if args.burst:
        requests = _requests(args.burst, args.free)
        for draft in (0, args.draft):
            run = _run(backend, requests, draft, "semantic", args.max_new)
            row = {"burst": args.burst, "draft": draft, "esi1_calls": len(run["esi1_ttft"]),
                   "esi1_ttft_p50_s": round(_pct(run["esi1_ttft"], 0.5) or 0.0, 3),
                   "esi1_ttft_p90_s": round(_pct(run["esi1_ttft"], 0.9) or 0.0, 3),
                   "makespan_s": round(run["seconds"], 2), "tok_s": round(run["tok_s"], 1)}
            rows.append(row)
            if not args.json:
                print(f"burst {args.burst} draft {draft}: ESI-1 TTFT p50 {row['esi1_ttft_p50_s']} s "
                      f"p90 {row['esi1_ttft_p90_s']} s ({row['esi1_calls']} calls), makespan {row['makespan_s']} s, "
                      f"{row['tok_s']} tok/s", flush=True)
    if args.json:
        print(json.dumps(rows, indent=2))
    return rows


if __name__ == "__main__":
    main()
