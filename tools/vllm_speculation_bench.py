"""vLLM's own prompt-lookup speculation (``ngram``) on the guidance model, beside our engine's
(``tools.speculation_bench``). Runs in the vLLM environment, offline, with our scheduler plug-in:

    python -m tools.speculation_bench --write-prompts var/guidance-prompts.json        # main environment
    .venv-vllm/bin/python -m tools.vllm_speculation_bench --prompts var/guidance-prompts.json \
        [--model models/guidance-llm] [--concurrency 1,16] [--draft 16] [--repeats 3]

For each concurrency N the first N prompts are generated greedily (vLLM's batch of N), without and with
``speculative_config={"method": "ngram", ...}``: tokens/s (median of the repeats) and whether every output is the
same. vLLM holds no read-out constraint (the stream guard does), so this is our ``--free`` mode's counterpart.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from inference.backends.vllm_server import PLUGIN


def _engine(model: str, draft: int, max_num_seqs: int):  # noqa: ANN202 - vllm.LLM
    from vllm import LLM

    spec = {"method": "ngram", "num_speculative_tokens": draft, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
    return LLM(model=model, dtype="float32", max_model_len=1024, enforce_eager=True, seed=0,
               max_num_seqs=max_num_seqs, scheduling_policy="priority", scheduler_cls=PLUGIN,
               **({"speculative_config": spec} if draft else {}))


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", required=True)
    parser.add_argument("--model", default="models/guidance-llm")
    parser.add_argument("--concurrency", default="1,16")
    parser.add_argument("--draft", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-new", type=int, default=384)
    args = parser.parse_args(argv)
    # as a server runs (inference.backends.vllm_server.server_env): a small CPU KV cache, nothing fetched; the engine
    # core in this process, so that one engine is gone before the next starts
    os.environ.update({"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "HF_HUB_OFFLINE": "1"})
    from vllm import SamplingParams

    prompts = json.loads(open(args.prompts, encoding="utf-8").read())
    params = SamplingParams(temperature=0.0, max_tokens=args.max_new)
    sizes = [int(x) for x in args.concurrency.split(",")]
    results: dict[int, dict[int, list[tuple[float, list[list[int]]]]]] = {}
    for draft in (0, args.draft):
        llm = _engine(args.model, draft, max(sizes))
        llm.generate(prompts[:2], params, use_tqdm=False)  # warm-up
        for n in sizes:
            for _ in range(args.repeats):
                started = time.perf_counter()
                outs = llm.generate(prompts[:n], params, use_tqdm=False)
                seconds = time.perf_counter() - started
                ids = [list(o.outputs[0].token_ids) for o in outs]
                results.setdefault(n, {}).setdefault(draft, []).append((sum(map(len, ids)) / seconds, ids))
        del llm
    rows = []
    for n in sizes:
        plain, fast = results[n][0], results[n][args.draft]
        row = {"concurrency": n, "draft": args.draft,
               "plain_tok_s": round(statistics.median(r for r, _ in plain), 1),
               "ngram_tok_s": round(statistics.median(r for r, _ in fast), 1),
               "identical": all(ids == plain[0][1] for _, ids in fast)}
        row["ratio"] = round(row["ngram_tok_s"] / row["plain_tok_s"], 2)
        rows.append(row)
        print(f"vLLM n={n:3d} ngram {args.draft}: {row['plain_tok_s']:8.1f} -> {row['ngram_tok_s']:8.1f} tok/s "
              f"({row['ratio']:.2f}x), identical {row['identical']}", flush=True)
    return rows


if __name__ == "__main__":
    main()
