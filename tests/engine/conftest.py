"""Fixtures of the engine tests that run the real inference worker process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid

import pytest
from django.conf import settings as django_settings

from tests.engine.reference import SOLO_MAX_NEW, corpus_prompts, solo_greedy
from tests.fixtures.services import REPO_ROOT, WorkerProcess, database_url_for_test_db
from triage.redis_clients import redis_bytes_client


@pytest.fixture
def isolated_stream(settings):
    """A stream and control channel of this test's own, in this process and in the worker processes."""
    suffix = uuid.uuid4().hex[:8]
    names = {"TRIAGE_INFERENCE_STREAM": f"test:inference:{suffix}", "TRIAGE_CONTROL_CHANNEL": f"test:control:{suffix}"}
    settings.TRIAGE = {**django_settings.TRIAGE, "INFERENCE_STREAM": names["TRIAGE_INFERENCE_STREAM"],
                       "CONTROL_CHANNEL": names["TRIAGE_CONTROL_CHANNEL"]}
    yield names
    redis_bytes_client().delete(names["TRIAGE_INFERENCE_STREAM"])


@pytest.fixture
def start_inference_worker(tiny_guidance_model, isolated_stream, transactional_db, tmp_path):
    """Start `manage.py run_inference_worker` (the python process itself, no shell) on the test database."""
    env = {
        **os.environ,
        **isolated_stream,
        "DATABASE_URL": database_url_for_test_db(),
        "REDIS_URL": django_settings.REDIS_URL,
        "DATABASE_CONN_MAX_AGE": "0",
        "TRIAGE_MODELS_DIR": str(tmp_path / "no-models"),  # no calibrated cost model: the preset
        "TRIAGE_LOG_LEVEL": "INFO",
        "TRIAGE_INFERENCE_NICE": "0",  # CPU priority is not what this test is about
    }
    started: list[WorkerProcess] = []

    def start(consumer: str, *extra: str, extra_env: dict[str, str] | None = None,
              max_new_tokens: int = 48) -> WorkerProcess:
        log_path = tmp_path / f"inference-{consumer}-{len(started)}.log"
        argv = [sys.executable, str(REPO_ROOT / "manage.py"), "run_inference_worker", "--model",
                str(tiny_guidance_model), "--device", "cpu", "--threads", "1", "--consumer", consumer,
                "--max-new-tokens", str(max_new_tokens), *extra]
        with open(log_path, "wb") as log:
            process = subprocess.Popen(argv, cwd=REPO_ROOT, env={**env, **(extra_env or {})}, stdout=log,
                                       stderr=subprocess.STDOUT)
        worker = WorkerProcess(process, log_path)
        started.append(worker)
        return worker

    yield start
    for worker in started:  # before the transactional teardown truncates the tables the workers use
        if worker.process.poll() is None:
            worker.process.send_signal(signal.SIGTERM)
            try:
                worker.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait()


@pytest.fixture(scope="module")
def prompts() -> list[str]:
    """Six served prompts of written calls (the tiny model's training calls)."""
    return corpus_prompts(6)


@pytest.fixture(scope="module")
def solo(tiny_backend, prompts) -> list[list[int]]:  # noqa: ANN001
    """Each prompt's greedy output alone (``SOLO_MAX_NEW`` tokens): what batching, preemption and speculation must
    reproduce token for token."""
    return [solo_greedy(tiny_backend, tiny_backend.encode(p), SOLO_MAX_NEW) for p in prompts]
