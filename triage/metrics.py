"""The dispatch app's Prometheus metrics: calls accepted by the intake, calls triaged by the Celery worker and
the time from API accept to triaged, by ESI; what the recovery sweep found and when it last ran; webhook
deliveries by outcome. Exposed by the process that counts them (config/metrics.py; a Celery worker sums its
pool processes); the inference worker has its own (worker/metrics.py)."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import Counter, Gauge, Histogram

SECONDS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300)

CALLS_ACCEPTED = Counter("triage_calls_accepted", "Calls stored by the intake (new, not idempotent repeats)")
CALLS_TRIAGED = Counter("triage_calls_triaged", "Calls classified, by ESI", ["esi"])
TRIAGE_SECONDS = Histogram("triage_triage_seconds", "API accept to triaged, by ESI", ["esi"], buckets=SECONDS)
# The sweep runs in whichever pool process takes it: the latest end of any of them ("max" in multiprocess mode).
SWEEP_LAST_RUN = Gauge("triage_sweep_last_run_timestamp_seconds", "When the recovery sweep last ended (Unix time)",
                       multiprocess_mode="max")
SWEEP_FOUND = Counter("triage_sweep_stuck_calls", "Calls the recovery sweep found left behind and sent on, by "
                      "status (received: a lost triage task; triaged: a failed stream append; restreamed: a lost "
                      "inference stream)", ["status"])
WEBHOOK_DELIVERIES = Counter("triage_webhook_deliveries", "Webhook delivery attempts, by outcome", ["outcome"])


def calls_triaged(levels_and_waits: Iterable[tuple[int, float]]) -> None:
    """Count calls just triaged: (ESI level, seconds since the API accepted the call) each."""
    for level, waited_s in levels_and_waits:
        CALLS_TRIAGED.labels(esi=str(level)).inc()
        TRIAGE_SECONDS.labels(esi=str(level)).observe(max(0.0, waited_s))


def call_accepted() -> None:
    CALLS_ACCEPTED.inc()


def sweep_done(*, received: int, triaged: int, restreamed: int, ended_at: float) -> None:
    for status, found in (("received", received), ("triaged", triaged), ("restreamed", restreamed)):
        SWEEP_FOUND.labels(status=status).inc(found)
    SWEEP_LAST_RUN.set(ended_at)


def webhook_attempted(outcome: str) -> None:
    WEBHOOK_DELIVERIES.labels(outcome=outcome).inc()
