"""`manage.py build_models`: everything the product's models need, built from fixtures/, deterministically.

1. Train the guidance LLM (tokenizer + small Llama) on call transcript -> reference guidance pairs.
2. Generate guidance for every call of the corpus with the engine: the REAL output lengths, written to
   <model>/output_lengths.jsonl, and the probe layer's hidden state at every step.
3. `train_predictors --lengths <that file>` (the ESI classifier and prompt-only length predictor).
4. Train the TRAIL length probe on the train split's hidden states, evaluate it on the test split against
   the prompt-only predictor, and write the model card.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import torch
from django.conf import settings
from django.core.management import call_command, get_commands
from django.core.management.base import BaseCommand
from tqdm import tqdm

from inference.backends.hf import HFBackend
from inference.guidance_corpus import (
    augmented_records,
    example_records,
    guidance_fit,
    guidance_prompt,
    training_pairs,
)
from inference.llm_training import FULL_CONFIG, TINY_CONFIG, train_guidance_model
from inference.predictors.length_probe import Trace, evaluate_probe, train_probe
from scheduler.config import SchedulerConfig
from scheduler.cost import PRESETS
from scheduler.policies import make_scheduler

CORPUS = Path(settings.BASE_DIR) / "fixtures" / "calls" / "calls.jsonl"


class _TraceRecorder:
    """A LengthRefiner that only records each request's hidden states (half precision)."""

    def __init__(self, layer: int) -> None:
        self.layer = layer
        self.hidden: dict[str, list[torch.Tensor]] = {}

    def observe(self, request_id: str, hidden: torch.Tensor, generated_tokens: int) -> float:
        self.hidden.setdefault(request_id, []).append(hidden.detach().to("cpu", torch.float16))
        return 1.0

    def forget(self, request_id: str) -> None:
        pass


def load_calls(path: Path, limit: int | None) -> list[dict]:
    if not path.exists():
        return []
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if limit:
        # Every scenario and split represented: take records round-robin by scenario.
        by_scenario: dict[str, list[dict]] = {}
        for r in records:
            by_scenario.setdefault(r.get("scenario", ""), []).append(r)
        picked, queues = [], [list(v) for _, v in sorted(by_scenario.items())]
        while len(picked) < limit and any(queues):
            for q in queues:
                if q and len(picked) < limit:
                    picked.append(q.pop(0))
        records = picked
    return records


def generate_all(backend: HFBackend, records: list[dict], probe_layer: int, max_new_tokens: int, batch: int,
                 progress: bool) -> tuple[dict[str, int], dict[str, str], _TraceRecorder]:
    recorder = _TraceRecorder(probe_layer)
    config = SchedulerConfig(policy="fcfs", batch_size=batch, kv_capacity_blocks=1 << 20)
    engine = backend.make_engine(make_scheduler(config, PRESETS["a100-4b"]), max_new_tokens=max_new_tokens,
                                 refiner=recorder)
    for r in records:
        engine.add_request(r["id"], guidance_prompt(r["transcript"]), level=3, predicted_output_tokens=64)
    lengths, texts = {}, {}
    bar = tqdm(total=len(records), desc="generating guidance", unit="call", disable=not progress)
    while engine.has_work():
        for f in engine.step().finished:
            lengths[f.request_id] = f.output_tokens
            texts[f.request_id] = f.text
            bar.update(1)
    bar.close()
    return lengths, texts, recorder


class Command(BaseCommand):
    help = "Train the guidance LLM, measure its real output lengths, train the predictors and the TRAIL probe."

    def add_arguments(self, parser):  # noqa: ANN001
        parser.add_argument("--tiny", action="store_true", help="the small test configuration (fast, CI-safe)")
        parser.add_argument("--out", default=settings.TRIAGE["INFERENCE_MODEL"], help="model directory")
        parser.add_argument("--corpus", default=str(CORPUS))
        parser.add_argument("--limit", type=int, default=None, help="use at most N calls of the corpus")
        parser.add_argument("--max-new-tokens", type=int, default=384)
        parser.add_argument("--skip-llm", action="store_true", help="reuse the LLM already at --out")
        parser.add_argument("--skip-predictors", action="store_true", help="do not call train_predictors")
        parser.add_argument("--threads", type=int, default=2)
        parser.add_argument("--no-progress", action="store_true")

    def handle(self, *args, **opts) -> None:  # noqa: ANN002, ANN003
        torch.set_num_threads(opts["threads"])
        progress = not opts["no_progress"]
        out = Path(opts["out"])
        calls = load_calls(Path(opts["corpus"]), opts["limit"])
        if not calls:
            self.stderr.write(f"no call corpus at {opts['corpus']}: training on the guidance corpus' examples only")
        train_calls = [r for r in calls if r.get("split", "train") == "train"]

        started = time.perf_counter()
        stages: dict[str, float] = {}

        def stage_done(name: str, since: float) -> float:
            now = time.perf_counter()
            stages[name] = round(now - since, 1)
            return now

        mark = started
        if not (opts["skip_llm"] and (out / "config.json").exists()):
            config = TINY_CONFIG if opts["tiny"] else FULL_CONFIG
            pairs = training_pairs(train_calls + example_records())
            augmented = augmented_records(train_calls + example_records(), config.augment_copies, config.seed,
                                          config.augment_keep, config.augment_word_drop,
                                          config.augment_synonym_rate)
            stats = train_guidance_model(pairs, out, config, progress=progress, decision_pairs=training_pairs(augmented))
            self.stdout.write(f"guidance LLM: {stats['parameters']:,} parameters, {stats['examples']} examples "
                              f"({len(augmented)} augmented), loss {stats['final_loss']:.3f}, {stats['train_s']} s -> {out}")

        mark = stage_done("llm", mark)
        backend = HFBackend.load(str(out), device="cpu")
        probe_layer = max(1, backend.model.config.num_hidden_layers // 2)
        records = calls or example_records()
        lengths, texts, recorder = generate_all(backend, records, probe_layer, opts["max_new_tokens"], 32, progress)
        lengths_path = out / "output_lengths.jsonl"
        lengths_path.write_text("".join(json.dumps({"id": rid, "output_tokens": n}) + "\n" for rid, n in lengths.items()))
        with (out / "generated_guidance.jsonl").open("w") as fh:
            for rid, text in texts.items():
                fh.write(json.dumps({"id": rid, "output_tokens": lengths[rid], "guidance": text}) + "\n")
        self.stdout.write(f"output lengths of {len(lengths)} calls -> {lengths_path}")
        mark = stage_done("generation", mark)

        if not opts["skip_predictors"]:
            if "train_predictors" in get_commands():
                call_command("train_predictors", lengths=str(lengths_path))
            else:
                self.stderr.write("train_predictors is not available yet: predictors not trained")

        mark = stage_done("predictors", mark)
        by_split: dict[str, list[Trace]] = {"train": [], "test": []}
        split_of = {r["id"]: r.get("split", "train") for r in records}
        for rid, states in recorder.hidden.items():
            if states:
                trace = Trace(rid, torch.stack(states).float(), lengths[rid])
                by_split["test" if split_of.get(rid) == "test" else "train"].append(trace)
        probe = train_probe(by_split["train"], probe_layer)
        probe.save(out / "length_probe")
        evaluation = evaluate_probe(probe, by_split["test"] or by_split["train"], self._prompt_only(records))
        mark = stage_done("probe", mark)
        if not opts["tiny"]:
            # The scheduler's cost model for this machine (the worker falls back to a GPU preset without it).
            call_command("calibrate", model=str(out), out=str(out.parent / "cost_model.json"),
                         threads=int(os.environ.get("TRIAGE_INFERENCE_THREADS", "1")))
            stage_done("calibrate", mark)
        fit = guidance_fit(records, texts)
        (out / "guidance_fit.json").write_text(json.dumps(fit, indent=1))
        self._write_card(out, backend, lengths, records, probe_layer, evaluation, fit, time.perf_counter() - started)
        (out / "build_stages.json").write_text(json.dumps(stages, indent=1))
        self.stdout.write(self.style.SUCCESS(
            f"models built in {time.perf_counter() - started:.0f} s ("
            + ", ".join(f"{name} {s:.0f} s" for name, s in stages.items()) + ")"))

    def _prompt_only(self, records: list[dict]) -> dict[str, float]:
        """The intake's prompt-only length predictions, when its predictors are built."""
        try:
            from inference.predictors import load_triage_predictor

            predictor = load_triage_predictor()
        except Exception as exc:  # noqa: BLE001 - predictors are optional here
            self.stderr.write(f"prompt-only predictor unavailable ({exc}); model card compares the probe alone")
            return {}
        preds = predictor.predict([r["transcript"] for r in records])
        return {r["id"]: float(p.predicted_output_tokens) for r, p in zip(records, preds, strict=True)}

    def _write_card(self, out: Path, backend: HFBackend, lengths: dict[str, int], records: list[dict],
                    probe_layer: int, evaluation: list[dict], fit: dict[str, dict], elapsed_s: float) -> None:
        training = json.loads((out / "training.json").read_text())
        by_scenario: dict[str, list[int]] = {}
        for r in records:
            by_scenario.setdefault(r.get("scenario", "?"), []).append(lengths.get(r["id"], 0))
        lines = [
            "# Guidance LLM — model card", "",
            f"Llama-architecture causal LM trained from scratch by `manage.py build_models` on the guidance corpus "
            f"(fixtures/guidance) and the call corpus' train split. {training['parameters']:,} parameters; "
            f"config `{json.dumps(training['config'])}`; final training loss {training['final_loss']:.3f}; "
            f"trained in {training['train_s']} s. Greedy decoding. Demonstration model, not clinical advice.", "",
            "## Output lengths (tokens, greedy, all calls)", "", "| scenario | calls | mean | min | max |",
            "|---|---|---|---|---|",
        ]
        for scenario, ls in sorted(by_scenario.items()):
            lines.append(f"| {scenario} | {len(ls)} | {sum(ls) / len(ls):.0f} | {min(ls)} | {max(ls)} |")
        lines += [
            "", "## Does the guidance fit the call?", "",
            "Share of calls whose greedy guidance opens as the call's reference guidance does (its first "
            "words name the scenario and what to send). The test split's call templates are unseen in training.", "",
            "| split | calls | fit |", "|---|---|---|",
        ]
        lines += [f"| {split} | {f['calls']} | {f['fit']:.1%} |" for split, f in fit.items()]
        worst = fit.get("test", {}).get("by_scenario", {})
        if worst:
            lines += ["", "Test split by scenario, worst first:", "", "| scenario | calls | fit |", "|---|---|---|"]
            lines += [f"| {k} | {v['calls']} | {v['fit']:.1%} |" for k, v in sorted(worst.items(), key=lambda kv: kv[1]["fit"])]
        lines += [
            "", f"## TRAIL length probe (layer {probe_layer} of {backend.model.config.num_hidden_layers})", "",
            "Mean absolute error of the remaining output length on the test split, by decode position: the probe "
            "with Bayesian smoothing vs the prompt-only predictor (its predicted total minus tokens generated).", "",
            "| position | requests | probe MAE | prompt-only MAE |", "|---|---|---|---|",
        ]
        for row in evaluation:
            lines.append(f"| {row['position']} | {row['requests']} | {row['probe_mae']} | {row['prompt_only_mae']} |")
        lines += ["", f"Built in {elapsed_s:.0f} s."]
        (out / "MODEL_CARD.md").write_text("\n".join(lines) + "\n")
        (out / "length_probe" / "evaluation.json").write_text(json.dumps(evaluation, indent=1))
