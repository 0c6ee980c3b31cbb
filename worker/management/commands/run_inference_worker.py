"""`manage.py run_inference_worker`: the embedded inference worker (docs/architecture.md §2 step 3, §2b)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
from pathlib import Path

import torch
from django.conf import settings
from django.core.management.base import BaseCommand

from inference.calibration import load_cost_model
from scheduler.policies import make_scheduler
from triage.redis_clients import redis_bytes_client
from triage.selectors.scheduler import scheduler_config_load
from worker.inference_worker import InferenceWorker, WorkerOptions

log = logging.getLogger("worker")
DEFAULT_SPECULATIVE_TOKENS = 16  # measured: docs/decisions/speculative-decoding.md


def build_engine(model: str, device: str, policy: str | None, max_new_tokens: int,  # noqa: ANN201 - Engine
                 speculative_tokens: int = 0, cost_correction: bool = True):
    """The configured backend around the configured model, driving the configured scheduler."""
    from inference.backends.hf import HFBackend

    config = scheduler_config_load()
    if policy:
        config = config.with_changes(policy=policy)
    cost_path = Path(settings.TRIAGE.get("COST_MODEL", Path(settings.MODELS_DIR) / "cost_model.json"))
    scheduler = make_scheduler(config, load_cost_model(cost_path))
    backend = HFBackend.load(model, device=device)
    refiner = None
    probe_dir = Path(model) / "length_probe"
    if (probe_dir / "length_probe.json").exists():
        from inference.length_probe import LengthProbe, LengthRefiner

        refiner = LengthRefiner(LengthProbe.load(probe_dir))
    return backend.make_engine(scheduler, max_new_tokens=max_new_tokens, refiner=refiner,
                               speculative_tokens=speculative_tokens, cost_correction=cost_correction)


def build_vllm_pool(policy: str | None, max_new_tokens: int):  # noqa: ANN201 - VllmPool
    """The vLLM servers of VLLM_URLS as the worker's executor; the tier rules come from the stored settings."""
    from inference.backends.vllm_pool import VllmPool

    t = settings.TRIAGE
    return VllmPool(t["VLLM_URLS"], model=t["VLLM_MODEL"], policy=policy or t["VLLM_POLICY"],
                    capacity=t["VLLM_MAX_NUM_SEQS"], max_new_tokens=max_new_tokens,
                    max_model_len=t["VLLM_MAX_MODEL_LEN"], config=scheduler_config_load(), events=t["VLLM_EVENTS"],
                    **({"routing": t["VLLM_ROUTING"]} if t["VLLM_ROUTING"] else {}))


class Command(BaseCommand):
    help = "Read inference requests from the Redis stream, generate guidance, stream tokens, store results."

    def add_arguments(self, parser):  # noqa: ANN001
        parser.add_argument("--model", default=settings.TRIAGE["INFERENCE_MODEL"])
        parser.add_argument("--device", default=settings.TRIAGE["INFERENCE_DEVICE"])
        parser.add_argument("--policy", default=None,
                            help="override SchedulerSettings.policy, or VLLM_POLICY with INFERENCE_BACKEND=vllm (loadtest)")
        parser.add_argument(
            "--consumer", default=os.environ.get("TRIAGE_INFERENCE_CONSUMER", socket.gethostname()),
            help="consumer name in the stream group; a restart under the same name resumes its pending entries at once",
        )
        parser.add_argument(
            "--claim-idle-ms", type=int, default=int(os.environ.get("TRIAGE_INFERENCE_CLAIM_IDLE_MS", "30000")),
            help="stream entries idle this long belong to a dead worker and are taken over (live workers "
                 "heartbeat theirs every third of it)",
        )
        parser.add_argument("--max-new-tokens", type=int, default=384)
        parser.add_argument(
            "--speculative-tokens", type=int,
            default=int(os.environ.get("TRIAGE_INFERENCE_SPECULATIVE_TOKENS", str(DEFAULT_SPECULATIVE_TOKENS))),
            help="draft tokens verified per call and step (prompt lookup and the read-out's forced tokens; 0: off)")
        parser.add_argument(
            "--cost-correction", action=argparse.BooleanOptionalAction,
            default=os.environ.get("TRIAGE_INFERENCE_COST_CORRECTION", "1") not in ("0", "false", "no"),
            help="measured iteration times correct the scheduler's cost model online (scheduler/cost_correction.py)")
        parser.add_argument("--metrics-port", type=int, default=int(os.environ.get("TRIAGE_INFERENCE_METRICS_PORT", "0")),
                            help="serve Prometheus metrics on this port (0: off)")
        parser.add_argument("--metrics-host", default=os.environ.get("TRIAGE_INFERENCE_METRICS_HOST", "127.0.0.1"),
                            help="address the metrics port binds (0.0.0.0: scrapable from another container)")
        # 1 by default: on a 2-core machine shared with web and Celery, a second torch thread cost the engine a
        # quarter of its throughput and slowed classification (docs/decisions/shared-cpu-settings.md).
        parser.add_argument("--threads", type=int, default=int(os.environ.get("TRIAGE_INFERENCE_THREADS", "1")))
        parser.add_argument(
            "--nice", type=int, default=int(os.environ.get("TRIAGE_INFERENCE_NICE", "10")),
            help="CPU niceness increment: where web, Celery and the engine share CPU cores, classifying and "
                 "accepting new calls must not queue behind generation (0: off)",
        )
        parser.add_argument(
            "--surge-control", action=argparse.BooleanOptionalAction,
            default=os.environ.get("TRIAGE_SURGE_CONTROL", "1") not in ("0", "false", "no"),
            help="the SLO monitor opens extra batch slots for ESI 1-2 in a surge (docs/decisions/surge-control.md)",
        )

    def handle(self, *args, **opts) -> None:  # noqa: ANN002, ANN003
        backend = settings.TRIAGE["INFERENCE_BACKEND"]
        if backend not in ("hf", "vllm"):
            raise SystemExit(f"INFERENCE_BACKEND={backend}: expected hf or vllm")
        if opts["nice"]:
            os.nice(opts["nice"])
        torch.set_num_threads(opts["threads"])
        if backend == "vllm":
            engine = build_vllm_pool(opts["policy"], opts["max_new_tokens"])
        else:
            engine = build_engine(opts["model"], opts["device"], opts["policy"], opts["max_new_tokens"],
                                  opts["speculative_tokens"], opts["cost_correction"])
        worker = InferenceWorker(engine, redis_bytes_client(), WorkerOptions(
            stream=settings.TRIAGE["INFERENCE_STREAM"], group=settings.TRIAGE["INFERENCE_GROUP"],
            consumer=opts["consumer"], control_channel=settings.TRIAGE["CONTROL_CHANNEL"],
            claim_idle_ms=opts["claim_idle_ms"], metrics_port=opts["metrics_port"] or None,
            metrics_host=opts["metrics_host"], surge_control=opts["surge_control"],
        ))
        signal.signal(signal.SIGTERM, lambda *_: worker.request_stop())
        signal.signal(signal.SIGINT, lambda *_: worker.request_stop())
        worker.start()
        self.stdout.write(f"inference worker {opts['consumer']} running ({engine.policy_name}, {opts['model']})")
        worker.run()
        self.stdout.write(f"inference worker stopped: {dict(worker.stats)}")
