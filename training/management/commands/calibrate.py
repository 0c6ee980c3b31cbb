"""`manage.py calibrate`: measure prefill, decode and swap times of the serving model here, fit the cost
model (alpha1, alpha2, gamma1, gamma2, beta, per-iteration overhead) and store it for the scheduler."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from django.conf import settings
from django.core.management.base import BaseCommand

from inference.backends.hf import HFBackend
from inference.calibration import calibrate, save_cost_model


def default_cost_model_path() -> Path:
    return Path(settings.TRIAGE.get("COST_MODEL", Path(settings.MODELS_DIR) / "cost_model.json"))


class Command(BaseCommand):
    help = "Measure prefill/decode/swap times of the inference model and store the fitted cost model (JSON)."

    def add_arguments(self, parser):  # noqa: ANN001
        parser.add_argument("--model", default=settings.TRIAGE["INFERENCE_MODEL"])
        parser.add_argument("--device", default=settings.TRIAGE["INFERENCE_DEVICE"])
        parser.add_argument("--out", default=None, help="default: models/cost_model.json")
        parser.add_argument("--repeats", type=int, default=5)
        parser.add_argument("--threads", type=int, default=2)

    def handle(self, *args, model: str, device: str, out: str | None, repeats: int, threads: int, **options) -> None:  # noqa: ANN002, ANN003
        torch.set_num_threads(threads)
        backend = HFBackend.load(model, device=device)
        result = calibrate(backend, repeats=repeats, progress=lambda line: self.stdout.write(f"  {line}"))
        path = Path(out) if out else default_cost_model_path()
        save_cost_model(result, path)
        self.stdout.write(json.dumps(result["cost_model"], indent=2))
        self.stdout.write(self.style.SUCCESS(f"cost model written to {path}"))
