"""Prepare, on a CPU with the whole project installed, what the GPU bench needs and a GPU machine cannot make:

    python -m tools.gpu_bench.prepare --predictors models/predictors [--calls 200] [--out fixtures/gpu_bench]

- ``burst.jsonl``: calls of the written corpus (``fixtures/calls/written/``, spread over its authors and levels)
  as the service would queue them: the level and answer length the trained predictors give each, and the
  guidance prompt of its selected protocol;
- ``tokenizer.json``: a byte-level BPE tokenizer trained the way the bundled guidance model's is
  (``training.guidance_llm.train_tokenizer``, its vocabulary size) on these prompts and the protocol library.

The GPU machine then needs only torch, transformers and this package (``python -m tools.gpu_bench``).
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

OUT = Path(__file__).resolve().parents[2] / "fixtures" / "gpu_bench"


def prepare(predictors: Path, calls: int, out: Path, seed: int = 0) -> dict[str, int]:
    from inference.guidance.plan import guidance_prompt, plan_guidance
    from judgment.predictors import load_triage_predictor
    from judgment.protocols import UNCLEAR, load_library
    from training.guidance_corpus import load_written
    from training.guidance_llm import FULL_CONFIG, train_tokenizer

    records = load_written()
    random.Random(seed).shuffle(records)
    records = records[:calls]
    predictor = load_triage_predictor(predictors)
    library = load_library()
    rows = []
    for record, prediction in zip(records, predictor.predict([r["transcript"] for r in records]), strict=True):
        choice = prediction.protocol
        protocol = choice.protocol if choice is not None else UNCLEAR
        family = library.protocols[choice.likeliest].family if choice is not None else "unknown"
        plan = plan_guidance(library, protocol, family, prediction.esi, prediction.patient_age)
        rows.append({"id": record["id"], "esi": record["esi"], "level": prediction.esi,
                     "predicted_output_tokens": prediction.predicted_output_tokens, "protocol": protocol,
                     "prompt": guidance_prompt(plan, record["transcript"])})
    texts = [r["prompt"] for r in rows] + [s for p in library.protocols.values() for b in p.bands
                                            for s in b.sentences]
    tokenizer = train_tokenizer(texts, FULL_CONFIG.vocab_size, FULL_CONFIG.split_suffixes)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.backend_tokenizer.save(str(out / "tokenizer.json"))
    (out / "burst.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows), encoding="utf-8")
    return {"calls": len(rows), "vocab": len(tokenizer)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--predictors", type=Path, default=Path("models/predictors"))
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    print(prepare(args.predictors, args.calls, args.out))


if __name__ == "__main__":
    main()
