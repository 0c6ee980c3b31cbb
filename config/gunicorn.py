"""gunicorn's settings for the intake server: ``gunicorn -c config/gunicorn.py config.wsgi:application``.

Its sync workers are separate processes, and a scrape of ``/metrics`` reaches one of them: each would report
its own counts. With ``PROMETHEUS_MULTIPROC_DIR`` set (compose sets it), prometheus_client's multiprocess mode
keeps every worker's series in files there and ``/metrics`` sums them (config/metrics.py). The directory is
emptied when the server starts (a dead server's counts would be added to the new one's) and a worker's files
are marked dead when it exits, as prometheus_client's documentation for gunicorn prescribes.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

MULTIPROC_DIR = os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")


def on_starting(server: Any) -> None:  # noqa: ANN401 - gunicorn's Arbiter
    if MULTIPROC_DIR:
        shutil.rmtree(MULTIPROC_DIR, ignore_errors=True)
        Path(MULTIPROC_DIR).mkdir(parents=True, exist_ok=True)


def child_exit(server: Any, worker: Any) -> None:  # noqa: ANN401 - gunicorn's Arbiter and Worker
    if MULTIPROC_DIR:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
