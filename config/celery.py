"""The Celery app of every worker and of beat (``celery -A config``); tasks are the dispatch app's
(``triage.tasks``)."""

import os
from typing import Any

from celery import Celery
from celery.signals import worker_process_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("triage")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["triage"])


@worker_process_init.connect
def serve_metrics(**_: Any) -> None:
    """Each pool process serves its own /metrics port (config/metrics.py)."""
    from config.metrics import serve_celery_metrics

    serve_celery_metrics()
