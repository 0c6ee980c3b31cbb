"""Prometheus exposition of the Django processes: web and intake count and time their requests and answer
/metrics; a Celery pool process serves its registry on a port of its own. What they count of calls is the
dispatch app's (``triage/metrics.py``); the inference worker has its own (``worker/metrics.py``).

Web and intake serve ``/metrics`` only to a scraper holding ``TRIAGE_METRICS_TOKEN`` (``Authorization: Bearer``;
without the setting the path does not exist: the numbers describe the centre's load). A Celery pool process
serves its registry on ``TRIAGE_CELERY_METRICS_PORT`` plus its pool index, bound to
``TRIAGE_CELERY_METRICS_HOST``. Under gunicorn (several worker processes behind one port) set
``PROMETHEUS_MULTIPROC_DIR``: prometheus_client's multiprocess mode then sums every worker's series in the one
``/metrics`` answer (config/gunicorn.py empties the directory at start and marks exited workers dead).
"""

from __future__ import annotations

import hmac
import logging
import os
import time
from collections.abc import Awaitable

from asgiref.sync import sync_to_async
from django.conf import settings
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
    """In a Celery pool process: serve this process's registry, one port per pool index."""
    port = int(os.environ.get("TRIAGE_CELERY_METRICS_PORT", "0"))
    if not port:
        return
    from billiard.process import current_process

    index = getattr(current_process(), "index", 0) or 0
    host = os.environ.get("TRIAGE_CELERY_METRICS_HOST", "127.0.0.1")
    start_http_server(port + index, addr=host)
    log.info("Celery metrics on http://%s:%d/metrics", host, port + index)
