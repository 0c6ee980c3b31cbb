"""The Celery app of every worker and of beat (``celery -A config``); tasks are the dispatch app's
(``triage.tasks``)."""

import os
from typing import Any

from celery import Celery
from celery.signals import worker_init, worker_process_shutdown

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("triage")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["triage"])


@worker_init.connect
def serve_metrics(**_: Any) -> None:
    """The worker's main process serves the sum of its pool processes' metrics on one port (config/metrics.py)."""
    from config.metrics import serve_celery_metrics

    serve_celery_metrics()


@worker_process_shutdown.connect
def pool_process_exited(pid: int | None = None, **_: Any) -> None:
    from config.metrics import celery_process_exited

    celery_process_exited(pid or os.getpid())
