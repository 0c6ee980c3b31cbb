"""Prometheus exposition of the Django processes: web and intake count and time their requests and answer
/metrics; a Celery worker serves the sum of its pool processes on one port. What they count of calls is the
dispatch app's (``triage/metrics.py``); the inference worker has its own (``worker/metrics.py``).

Web and intake serve ``/metrics`` only to a scraper holding ``TRIAGE_METRICS_TOKEN`` (``Authorization: Bearer``;
without the setting the path does not exist: the numbers describe the centre's load).

Several processes behind one scrape use prometheus_client's multiprocess mode, as its documentation prescribes:
``PROMETHEUS_MULTIPROC_DIR`` names a directory where each process keeps its series, emptied when the server
starts (a dead server's counts would be added to the new one's), and a process's files are marked dead when it
exits. Under gunicorn, config/gunicorn.py does it and ``/metrics`` sums the workers. A Celery worker's main
process serves the sum of its pool processes on ``TRIAGE_CELERY_METRICS_PORT`` (bound to
``TRIAGE_CELERY_METRICS_HOST``): one target however many pool processes run or are replaced, and no counter
that jumps between scrapes.
"""

from __future__ import annotations

import hmac
import logging
import os
import shutil
import time
from collections.abc import Awaitable
from pathlib import Path

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse, HttpResponseBase, HttpResponseNotFound
from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
    start_http_server,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from config.middleware import DualModeMiddleware

log = logging.getLogger(__name__)
METRICS_PATH = "/metrics"
REQUESTS = Counter("triage_web_requests", "HTTP requests answered, by method and status class",
                   ["method", "status"])
REQUEST_SECONDS = Histogram("triage_web_request_seconds", "HTTP request duration, by method", ["method"],
                            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))


def metrics_response(request: HttpRequest) -> HttpResponseBase:
    token = settings.TRIAGE["METRICS_TOKEN"]
    given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
    if not token or not hmac.compare_digest(given.encode(), token.encode()):
        return HttpResponseNotFound()
    return HttpResponse(generate_latest(_registry()), content_type=CONTENT_TYPE_LATEST)


def _registry() -> CollectorRegistry:
    """This process's registry, or, in multiprocess mode, one that sums every process's files."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return REGISTRY
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    return registry


class RequestMetricsMiddleware(DualModeMiddleware):
    """Counts and times every request, and answers /metrics."""

    def __call__(self, request: HttpRequest) -> HttpResponseBase | Awaitable[HttpResponseBase]:
        if request.path_info == METRICS_PATH:
            return sync_to_async(metrics_response)(request) if self.is_async else metrics_response(request)
        if self.is_async:
            return self._acall(request)
        started = time.perf_counter()
        response = self.get_response(request)
        _observe(request, response, started)
        return response

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        started = time.perf_counter()
        response = await self.get_response(request)
        _observe(request, response, started)
        return response


def _observe(request: HttpRequest, response: HttpResponseBase, started: float) -> None:
    REQUEST_SECONDS.labels(method=request.method).observe(time.perf_counter() - started)
    REQUESTS.labels(method=request.method, status=f"{response.status_code // 100}xx").inc()


def serve_celery_metrics() -> None:
    """In a Celery worker's main process, before its pool starts: serve the sum of the pool processes' series on
    ``TRIAGE_CELERY_METRICS_PORT``. Refuses to start without ``PROMETHEUS_MULTIPROC_DIR``: each pool process
    would count apart and the port would show none of it."""
    port = int(os.environ.get("TRIAGE_CELERY_METRICS_PORT", "0"))
    if not port:
        return
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")
    if not directory:
        raise ImproperlyConfigured("TRIAGE_CELERY_METRICS_PORT needs PROMETHEUS_MULTIPROC_DIR (a directory of this "
                                   "worker's own) so that the port sums the pool processes")
    shutil.rmtree(directory, ignore_errors=True)
    Path(directory).mkdir(parents=True, exist_ok=True)
    host = os.environ.get("TRIAGE_CELERY_METRICS_HOST", "127.0.0.1")
    start_http_server(port, addr=host, registry=_registry())
    log.info("Celery metrics on http://%s:%d/metrics (the sum of the pool processes)", host, port)


def celery_process_exited(pid: int) -> None:
    """A pool process ends: its live gauges stop counting (its counters and histograms stay in the sum)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR") and os.environ.get("TRIAGE_CELERY_METRICS_PORT"):
        multiprocess.mark_process_dead(pid)
