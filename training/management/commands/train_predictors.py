"""Train the ESI classifier and the output-length predictor (thin wrapper over training.predictors.pipeline)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser


def default_lengths_path() -> Path:
    return Path(settings.MODELS_DIR) / "guidance-llm" / "output_lengths.jsonl"


class Command(BaseCommand):
    help = "Train the triage predictors; writes the bundle, metrics.json and MODEL_CARD.md to --out."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--out", type=Path, help="output directory (default: TRIAGE['PREDICTORS_DIR'])")
        parser.add_argument("--tiny", action="store_true", help="small, fast config for tests")
        parser.add_argument(
            "--lengths",
            type=Path,
            help="JSONL {id, output_tokens} of the guidance LLM's real output lengths "
            "(default: <models>/guidance-llm/output_lengths.jsonl when it exists, else a labelled proxy)",
        )
        parser.add_argument("--corpus", type=Path, help="template corpus, scored for reference (default: fixtures/calls/calls.jsonl)")
        parser.add_argument("--written", type=Path, help="ESI training corpus (default: fixtures/calls/written/)")
        parser.add_argument("--seed", type=int, help="override the config's seed")

    def handle(self, *args: Any, **options: Any) -> None:
        from training.predictors import pipeline as training

        # call_command(..., lengths="...") passes strings through without argparse's type=Path
        lengths, out, corpus, written = (
            Path(options[k]) if options[k] else None for k in ("lengths", "out", "corpus", "written")
        )
        if lengths is not None and not lengths.is_file():
            raise CommandError(f"--lengths {lengths}: no such file")
        config = training.TINY if options["tiny"] else training.FULL
        if options["seed"] is not None:
            config = dataclasses.replace(config, seed=options["seed"])
        out = out or Path(settings.TRIAGE["PREDICTORS_DIR"])
        metrics = training.train(
            config,
            out_dir=out,
            corpus_path=corpus or training.DEFAULT_CORPUS,
            written_path=written or training.WRITTEN_CORPUS,
            lengths_path=lengths or default_lengths_path(),
            log=self.stdout.write,
        )
        self.stdout.write(f"{metrics['version']} -> {out} (catalogue {metrics['catalogue']})")
        for name, result in metrics["evaluation"].items():
            esi = result["esi"]
            self.stdout.write(
                f"{name} set: exact {esi['accuracy']:.3f}, under-triage {esi['under_triage_rate']:.1%}, "
                f"over-triage {esi['over_triage_rate']:.1%}, ESI-1 recall {esi['per_level']['1']['recall']:.3f} (n={esi['n']})"
            )
            if "protocol" in result:
                p = result["protocol"]
                self.stdout.write(
                    f"{name} set protocol: right {p['right']:.1%}, unclear {p['unclear']:.1%}, "
                    f"wrong and confident {p['wrong_confident']:.1%}"
                )
        lengths = ", ".join(f"{name} {r['length']['mae_tokens']:.1f}" for name, r in metrics["evaluation"].items())
        self.stdout.write(
            f"length MAE (tokens) {lengths} ({metrics['length_label_source']}); trained in {metrics['timing']['train_s']} s"
        )
