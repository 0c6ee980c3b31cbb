"""The dispatch app's Prometheus metrics: calls accepted by the intake, calls triaged by the Celery worker and
the time from API accept to triaged, by ESI. Exposed by the process that counts them (config/metrics.py); the
inference worker has its own (worker/metrics.py)."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import Counter, Histogram

SECONDS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300)

CALLS_ACCEPTED = Counter("triage_calls_accepted", "Calls stored by the intake (new, not idempotent repeats)")
CALLS_TRIAGED = Counter("triage_calls_triaged", "Calls classified, by ESI", ["esi"])
TRIAGE_SECONDS = Histogram("triage_triage_seconds", "API accept to triaged, by ESI", ["esi"], buckets=SECONDS)


def calls_triaged(levels_and_waits: Iterable[tuple[int, float]]) -> None:
    """Count calls just triaged: (ESI level, seconds since the API accepted the call) each."""
    for level, waited_s in levels_and_waits:
        CALLS_TRIAGED.labels(esi=str(level)).inc()
        TRIAGE_SECONDS.labels(esi=str(level)).observe(max(0.0, waited_s))


def call_accepted() -> None:
    CALLS_ACCEPTED.inc()
