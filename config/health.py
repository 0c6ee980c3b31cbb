"""Liveness and readiness probes for orchestrators and load balancers.

``/healthz``: the process answers (no dependency is touched: a database outage must not get every web process
restarted). ``/readyz``: this process can take calls: PostgreSQL answers, every migration is applied, Redis
answers; 503 naming what is not. The inference worker's heartbeat is reported but does not make the web
unready: calls are accepted and wait in the stream while no worker runs, and taking the web out of rotation
would refuse them instead.

Answered by the first middleware, before host validation and the https redirect: a probe comes over plain
http from inside the host or the container network, under whatever Host header it has.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable

from asgiref.sync import sync_to_async
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, HttpResponseBase, JsonResponse

from config.middleware import DualModeMiddleware
from triage.redis_clients import ENGINE_METRICS_KEY, redis_bytes_client

LIVENESS_PATH = "/healthz"
READINESS_PATH = "/readyz"
WORKER_STALE_AFTER_S = 30.0


def _database() -> str | None:
    try:
        connection = connections[DEFAULT_DB_ALIAS]
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        executor = MigrationExecutor(connection)
        if executor.migration_plan(executor.loader.graph.leaf_nodes()):
            return "migrations not applied"
    except Exception as error:  # noqa: BLE001 - any failure means not ready; its class names it
        return f"database: {type(error).__name__}"
    return None


def _redis() -> tuple[str | None, float | None]:
    """An error (or None) and the age in seconds of the newest inference worker heartbeat (None: none seen)."""
    try:
        client = redis_bytes_client()
        client.ping()
        updated = client.hget(ENGINE_METRICS_KEY, "updated_at")
    except Exception as error:  # noqa: BLE001
        return f"redis: {type(error).__name__}", None
    return None, (round(time.time() - float(updated), 1) if updated else None)


def readiness() -> tuple[bool, dict]:
    """Whether this process is ready, with what was checked. The inference worker's heartbeat and the recovery
    sweep's last run (beat's liveness) are reported; neither makes this process unready."""
    database = _database()
    redis_error, worker_age = _redis()
    problems = [p for p in (database, redis_error) if p]
    sweep_age = None if redis_error else _sweep_age()
    return not problems, {"ready": not problems, "problems": problems,
                          "inference_worker": {"state": _state(worker_age, WORKER_STALE_AFTER_S),
                                               "heartbeat_age_s": worker_age},
                          "sweep": {"state": _state(sweep_age, 4 * _sweep_interval_s()), "last_age_s": sweep_age}}


def _state(age: float | None, stale_after_s: float) -> str:
    return "unknown" if age is None else ("stale" if age > stale_after_s else "ok")


def _sweep_age() -> float | None:
    from triage.services.recovery import sweep_age_s

    try:
        return sweep_age_s()
    except Exception:  # noqa: BLE001 - a probe reports, it does not fail on a report
        return None


def _sweep_interval_s() -> float:
    from django.conf import settings

    return float(settings.CELERY_BEAT_SCHEDULE["sweep-stuck-calls"]["schedule"])


def _probe(path: str) -> HttpResponseBase:
    if path == LIVENESS_PATH:
        return JsonResponse({"alive": True})
    ready, body = readiness()
    return JsonResponse(body, status=200 if ready else 503)


class HealthMiddleware(DualModeMiddleware):
    """Answers the two probe paths itself; everything else goes on down the stack."""

    def __call__(self, request: HttpRequest) -> HttpResponseBase | Awaitable[HttpResponseBase]:
        path = request.path_info.rstrip("/")
        if path in (LIVENESS_PATH, READINESS_PATH):
            return sync_to_async(_probe)(path) if self.is_async else _probe(path)
        return self.get_response(request)
