"""`manage.py build_models`: everything the product's models need, built from fixtures/, deterministically.

1. Train the guidance LLM (tokenizer + small Llama) to read out the protocol text its prompt carries: for every
   written call (fixtures/calls/written/), the plan of its labelled protocol and ESI (training.guidance_corpus).
2. Generate with the engine for every written call and every evaluation-set call: the REAL output lengths
   (<model>/output_lengths.jsonl), the probe layer's hidden states, and whether each guidance reads its plan out.
3. `train_predictors --lengths <that file>` (the ESI, protocol and length heads).
4. The served path on the evaluation sets: the trained selector's protocol and level make the plan, the engine
   generates, the stream guard counts off-protocol sentences.
5. Train the TRAIL length probe on the hidden states of most authors' calls, evaluate it on the rest, and
   write the model card.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import torch
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand
from tqdm import tqdm

from inference.backends.hf import HFBackend
from inference.guidance.guard import StreamGuard
from inference.guidance.plan import GuidancePlan, guidance_prompt, plan_guidance
from judgment.protocols import load_library
from scheduler.config import SchedulerConfig
from scheduler.cost import PRESETS
from scheduler.policies import make_scheduler
from training.guidance_corpus import example_records, follows_plan, load_written, record_plan, training_pairs
from training.guidance_llm import FULL_CONFIG, TINY_CONFIG, train_guidance_model
from training.length_probe import Trace, evaluate_probe, train_probe
from training.predictors import pipeline as predictor_training

PROBE_TEST_AUTHORS = 3  # the last authors in sorted order: the probe is evaluated on calls of authors it never saw


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


def generate_all(backend: HFBackend, prompts: dict[str, str], probe_layer: int, max_new_tokens: int, batch: int,
                 progress: bool, read_out: dict[str, tuple[str, ...]] | None = None,
                 ) -> tuple[dict[str, int], dict[str, str], _TraceRecorder]:
    """Greedy guidance for every prompt (by id): output tokens, texts and the probe layer's hidden states.
    ``read_out``: the sentences each output is held to, as the worker holds them under strict guarding."""
    recorder = _TraceRecorder(probe_layer)
    config = SchedulerConfig(policy="fcfs", batch_size=batch, kv_capacity_blocks=1 << 20)
    engine = backend.make_engine(make_scheduler(config, PRESETS["a100-4b"]), max_new_tokens=max_new_tokens,
                                 refiner=recorder)
    for rid, prompt in prompts.items():
        engine.add_request(rid, prompt, level=3, predicted_output_tokens=64,
                           read_out=read_out.get(rid) if read_out is not None else None)
    lengths, texts = {}, {}
    bar = tqdm(total=len(prompts), desc="generating guidance", unit="call", disable=not progress)
    while engine.has_work():
        for f in engine.step().finished:
            lengths[f.request_id] = f.output_tokens
            texts[f.request_id] = f.text
            bar.update(1)
    bar.close()
    return lengths, texts, recorder


def off_protocol_sentences(text: str, plan: GuidancePlan) -> int:
    """What the stream guard counts for ``text`` streamed under ``plan``."""
    guard = StreamGuard(plan.template)
    guard.feed(text)
    guard.finish()
    return guard.off_protocol


def plan_report(plans: dict[str, GuidancePlan], texts: dict[str, str]) -> dict[str, float | int]:
    """How many generated texts read their plan out exactly, and the off-protocol sentences among them."""
    read = sum(follows_plan(texts[rid], plan) for rid, plan in plans.items())
    off = {rid: off_protocol_sentences(texts[rid], plan) for rid, plan in plans.items()}
    return {"calls": len(plans), "read_out": read, "read_out_share": round(read / max(1, len(plans)), 4),
            "off_protocol_sentences": sum(off.values()), "calls_with_off_protocol": sum(n > 0 for n in off.values())}


class Command(BaseCommand):
    help = ("Train the guidance LLM on protocol plans, measure its real output lengths and whether it reads its "
            "plan out, train the predictors, check the served path with the stream guard, train the TRAIL probe.")

    def add_arguments(self, parser):  # noqa: ANN001
        parser.add_argument("--tiny", action="store_true", help="the small test configuration (fast, CI-safe)")
        parser.add_argument("--out", default=settings.TRIAGE["INFERENCE_MODEL"], help="model directory")
        parser.add_argument("--limit", type=int, default=None, help="use at most N written calls")
        parser.add_argument("--max-new-tokens", type=int, default=384)
        parser.add_argument("--skip-llm", action="store_true", help="reuse the LLM already at --out")
        parser.add_argument("--skip-predictors", action="store_true", help="do not call train_predictors")
        parser.add_argument("--threads", type=int, default=2)
        parser.add_argument("--no-progress", action="store_true")
        parser.add_argument("--load-model", nargs="?", const=str(Path(settings.MODELS_DIR) / "load-smollm2"),
                            default=None, metavar="DIR",
                            help="only prepare the load-test model (SmolLM2-135M-Instruct, bf16) in DIR")

    def handle(self, *args, **opts) -> None:  # noqa: ANN002, ANN003
        torch.set_num_threads(opts["threads"])
        if opts["load_model"]:
            from training.load_model import build_load_model

            self.stdout.write(f"load-test model -> {build_load_model(Path(opts['load_model']))}")
            return
        progress = not opts["no_progress"]
        out = Path(opts["out"])
        written = example_records() if opts["tiny"] else load_written()[: opts["limit"]]
        evaluation = self._evaluation_records(opts["tiny"])
        started = mark = time.perf_counter()
        stages: dict[str, float] = {}

        def stage_done(name: str, since: float) -> float:
            now = time.perf_counter()
            stages[name] = round(now - since, 1)
            return now

        if not (opts["skip_llm"] and (out / "config.json").exists()):
            config = TINY_CONFIG if opts["tiny"] else FULL_CONFIG
            pairs = training_pairs(written, seed=config.seed, switched_share=config.switched_share)
            stats = train_guidance_model(pairs, out, config, progress=progress)
            self.stdout.write(f"guidance LLM: {stats['parameters']:,} parameters, {stats['examples']} examples, "
                              f"loss {stats['final_loss']:.3f}, {stats['train_s']} s -> {out}")
        mark = stage_done("llm", mark)

        backend = HFBackend.load(str(out), device="cpu")
        probe_layer = max(1, backend.model.config.num_hidden_layers // 2)
        library = load_library()
        labelled = {r["id"]: record_plan(r, library) for r in [*written, *evaluation]}
        transcripts = {r["id"]: r["transcript"] for r in [*written, *evaluation]}
        lengths, texts, recorder = generate_all(
            backend, {rid: guidance_prompt(plan, transcripts[rid]) for rid, plan in labelled.items()},
            probe_layer, opts["max_new_tokens"], 32, progress,
        )
        lengths_path = out / "output_lengths.jsonl"
        lengths_path.write_text("".join(json.dumps({"id": rid, "output_tokens": n}) + "\n" for rid, n in lengths.items()))
        with (out / "generated_guidance.jsonl").open("w") as fh:
            for rid, text in texts.items():
                fh.write(json.dumps({"id": rid, "output_tokens": lengths[rid], "guidance": text}) + "\n")
        written_ids = {r["id"] for r in written}
        reports = {
            "written corpus (labelled plans)": plan_report({k: v for k, v in labelled.items() if k in written_ids}, texts),
            "evaluation sets (labelled plans)": plan_report({k: v for k, v in labelled.items() if k not in written_ids},
                                                            texts),
        }
        self.stdout.write(f"output lengths of {len(lengths)} calls -> {lengths_path}")
        mark = stage_done("generation", mark)

        if not opts["skip_predictors"]:
            call_command("train_predictors", lengths=str(lengths_path), tiny=opts["tiny"])
            reports.update(self._served_path(backend, evaluation, opts["max_new_tokens"]))
        mark = stage_done("predictors", mark)

        probe_test = set(sorted({rid.split("-")[0] for rid in written_ids})[-PROBE_TEST_AUTHORS:])
        by_split: dict[str, list[Trace]] = {"train": [], "test": []}
        for rid, states in recorder.hidden.items():
            if states and rid in written_ids:
                trace = Trace(rid, torch.stack(states).float(), lengths[rid])
                by_split["test" if rid.split("-")[0] in probe_test else "train"].append(trace)
        probe = train_probe(by_split["train"], probe_layer)
        probe.save(out / "length_probe")
        probe_evaluation = evaluate_probe(probe, by_split["test"] or by_split["train"], self._prompt_only(written))
        mark = stage_done("probe", mark)
        if not opts["tiny"]:
            # The scheduler's cost model for this machine (the worker falls back to a GPU preset without it).
            call_command("calibrate", model=str(out), out=str(out.parent / "cost_model.json"),
                         threads=int(os.environ.get("TRIAGE_INFERENCE_THREADS", "1")))
            stage_done("calibrate", mark)
        (out / "guidance_plans.json").write_text(json.dumps(reports, indent=1))
        self._write_card(out, backend, lengths, labelled, probe_layer, probe_evaluation, reports,
                         time.perf_counter() - started)
        (out / "build_stages.json").write_text(json.dumps(stages, indent=1))
        self.stdout.write(self.style.SUCCESS(
            f"models built in {time.perf_counter() - started:.0f} s ("
            + ", ".join(f"{name} {s:.0f} s" for name, s in stages.items()) + ")"))

    @staticmethod
    def _evaluation_records(tiny: bool) -> list[dict]:
        config = predictor_training.TINY if tiny else predictor_training.FULL
        return [r for name in predictor_training.EVALUATION_SETS for r in predictor_training.evaluation_set(name, config)]

    def _served_path(self, backend: HFBackend, records: list[dict], max_new_tokens: int) -> dict[str, dict]:
        """The evaluation sets as served: the trained predictors choose protocol and level, the plan follows
        them, the engine generates, the stream guard judges every sentence. Twice: as the worker serves them
        under strict guarding (the read-out constrained to the plan's sentences), and the model unconstrained (as
        a server that is not constrained would stream them, the guard alone holding them)."""
        from judgment.predictors import load_triage_predictor

        library = load_library()
        predictions = load_triage_predictor().predict([r["transcript"] for r in records])
        plans = {
            r["id"]: plan_guidance(library, p.protocol.protocol, library.protocols[p.protocol.likeliest].family, p.esi,
                                   p.patient_age)
            for r, p in zip(records, predictions, strict=True)
        }
        prompts = {r["id"]: guidance_prompt(plans[r["id"]], r["transcript"]) for r in records}
        _, served, _ = generate_all(backend, prompts, 1, max_new_tokens, 32, progress=False,
                                    read_out={rid: plan.sentences for rid, plan in plans.items()})
        _, free, _ = generate_all(backend, prompts, 1, max_new_tokens, 32, progress=False)
        return {"evaluation sets (served path)": plan_report(plans, served),
                "evaluation sets (served path, unconstrained)": plan_report(plans, free)}

    def _prompt_only(self, records: list[dict]) -> dict[str, float]:
        """The intake's prompt-only length predictions, when its predictors are built."""
        try:
            from judgment.predictors import load_triage_predictor

            predictor = load_triage_predictor()
        except Exception as exc:  # noqa: BLE001 - predictors are optional here
            self.stderr.write(f"prompt-only predictor unavailable ({exc}); model card compares the probe alone")
            return {}
        preds = predictor.predict([r["transcript"] for r in records])
        return {r["id"]: float(p.predicted_output_tokens) for r, p in zip(records, preds, strict=True)}

    def _write_card(self, out: Path, backend: HFBackend, lengths: dict[str, int], plans: dict[str, GuidancePlan],
                    probe_layer: int, evaluation: list[dict], reports: dict[str, dict], elapsed_s: float) -> None:
        training = json.loads((out / "training.json").read_text())
        by_protocol: dict[str, list[int]] = {}
        for rid, plan in plans.items():
            by_protocol.setdefault(plan.protocol, []).append(lengths.get(rid, 0))
        lines = [
            "# Guidance LLM — model card", "",
            "Llama-architecture causal LM trained from scratch by `manage.py build_models` to read out the protocol "
            "text its prompt carries (inference/guidance/plan.py: protocol id and version, ESI band, the band's "
            "instructions, the call), on the written corpus' calls with their labelled protocol and level "
            f"(fixtures/calls/written/). {training['parameters']:,} parameters; config "
            f"`{json.dumps(training['config'])}`; final training loss {training['final_loss']:.3f}; trained in "
            f"{training['train_s']} s. Greedy decoding. Demonstration model, not clinical advice.", "",
            "## Does the guidance follow its protocol?", "",
            "Read out: the generated guidance is the plan's text exactly. Off-protocol sentences: what the stream "
            "guard (inference/guidance/guard.py, strict) would flag. The served path takes the protocol (or "
            "`unclear`: the family's key questions) and the level from the trained predictors, and is generated "
            "as the inference worker generates under strict guarding: each next token held to the plan's "
            "sentences (inference/guidance/read_out.py). \"Unconstrained\": the model alone, as a server that "
            "is not constrained would stream it, the guard alone holding it.", "",
            "| calls | n | read out exactly | off-protocol sentences | calls with any |", "|---|---|---|---|---|",
            *(f"| {name} | {r['calls']} | {r['read_out_share']:.1%} | {r['off_protocol_sentences']} | "
              f"{r['calls_with_off_protocol']} |" for name, r in reports.items()),
            "", "## Output lengths (tokens, greedy)", "", "| protocol | calls | mean | min | max |", "|---|---|---|---|---|",
        ]
        for protocol, ls in sorted(by_protocol.items()):
            lines.append(f"| {protocol} | {len(ls)} | {sum(ls) / len(ls):.0f} | {min(ls)} | {max(ls)} |")
        lines += [
            "", f"## TRAIL length probe (layer {probe_layer} of {backend.model.config.num_hidden_layers})", "",
            f"Mean absolute error of the remaining output length on the calls of the last {PROBE_TEST_AUTHORS} "
            "authors (not trained on), by decode position: the probe with Bayesian smoothing vs the prompt-only "
            "predictor (its predicted total minus tokens generated).", "",
            "| position | requests | probe MAE | prompt-only MAE |", "|---|---|---|---|",
        ]
        for row in evaluation:
            lines.append(f"| {row['position']} | {row['requests']} | {row['probe_mae']} | {row['prompt_only_mae']} |")
        lines += ["", f"Built in {elapsed_s:.0f} s."]
        (out / "MODEL_CARD.md").write_text("\n".join(lines) + "\n")
        (out / "length_probe" / "evaluation.json").write_text(json.dumps(evaluation, indent=1))
