"""`manage.py demo` stops everything it started, whatever signals arrive while it stops: a service manager's
SIGTERM, then another (or Ctrl-C) during the shutdown, leaves no web server, Celery worker, beat or inference
worker behind (issue 32: a second signal used to abandon the stopping)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from tests.fixtures.predictors import predictor_env
from tests.fixtures.services import database_url_for_test_db
from tools.stack import free_port

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_two_sigterms_while_the_demo_stops_leave_no_process_behind(tiny_guidance_model, trained_predictors_dir,
                                                                   settings, tmp_path):
    suffix = uuid.uuid4().hex[:8]
    env = {**os.environ, "DATABASE_URL": database_url_for_test_db(), "DATABASE_CONN_MAX_AGE": "0",
           "REDIS_URL": settings.REDIS_URL, "INFERENCE_MODEL": str(tiny_guidance_model),
           "TRIAGE_VAR_DIR": str(tmp_path), "TRIAGE_INFERENCE_STREAM": f"test:demo:{suffix}",
           "TRIAGE_CONTROL_CHANNEL": f"test:demo-control:{suffix}", **predictor_env(trained_predictors_dir)}
    log = open(tmp_path / "demo.out", "w+")  # noqa: SIM115 - read back below
    demo = subprocess.Popen([sys.executable, str(REPO / "manage.py"), "demo", "--no-replay", "--port",
                             str(free_port())], env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180
        while "running; Ctrl-C stops everything" not in (tmp_path / "demo.out").read_text():
            assert demo.poll() is None and time.monotonic() < deadline, (tmp_path / "demo.out").read_text()
            time.sleep(0.5)
        started = psutil.Process(demo.pid).children(recursive=True)
        names = " ".join(" ".join(p.cmdline()) for p in started)
        assert "daphne" in names and "celery" in names and "run_inference_worker" in names, names
        demo.send_signal(signal.SIGTERM)
        time.sleep(0.3)  # the stack is stopping its children now
        demo.send_signal(signal.SIGTERM)
        demo.send_signal(signal.SIGINT)
        assert demo.wait(timeout=120) == 0, (tmp_path / "demo.out").read_text()
        left = [p for p in started if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        assert left == [], [" ".join(p.cmdline()) for p in left]
    finally:
        if demo.poll() is None:
            demo.kill()
        for process in psutil.Process().children(recursive=True):
            if "manage.py" in " ".join(process.cmdline()) and "demo" in process.cmdline():
                process.kill()
        log.close()
