"""Celery tasks: thin. They take ids, load what they need and call a service; both are idempotent."""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import Any

from celery import shared_task
from celery.signals import worker_process_init
from django.conf import settings
from django.db import DatabaseError
from django.utils import timezone
from django.utils.module_loading import import_string
from redis import RedisError

from triage import metrics
from triage.models import Call, CallStatus
from triage.selectors.calls import calls_with_unread_narrative, guidance_sources_ended
from triage.services.assessments import calls_enqueue_or_leave_for_sweep
from triage.services.batching import Predictor, call_triage_micro_batch
from triage.services.board import calls_escalate_overdue
from triage.services.dispatch import send_retriage_task, send_triage_task, triage_task_slot_release
from triage.services.incidents import incident_guidance_settle
from triage.services.recovery import calls_restream_if_lost, sweep_mark_done
from triage.services.retriage import call_retriage
from triage.services.webhooks import webhook_backoff_s, webhook_deliver

logger = logging.getLogger(__name__)

# The queue comes from CELERY_TASK_ROUTES (the task attribute is deprecated).
RELIABLE = {"acks_late": True, "reject_on_worker_lost": True}
# Every task has a time limit: a hung one is killed (and its message redelivered), never holds a pool process
# for good. Classifying a micro-batch takes well under a second; a sweep, a few.
TRIAGE_LIMITS = {"soft_time_limit": 120, "time_limit": 180}
WEBHOOK_LIMITS = {"soft_time_limit": settings.TRIAGE["WEBHOOK_TIMEOUT_S"] * 2 + 10,
                  "time_limit": settings.TRIAGE["WEBHOOK_TIMEOUT_S"] * 2 + 30}
# OSError covers missing predictor files while `train_predictors` is still running.
RETRYABLE = (DatabaseError, RedisError, OSError)


def load_predictor() -> Predictor:
    loader = import_string(settings.TRIAGE["PREDICTOR_LOADER"])
    return loader(settings.TRIAGE["PREDICTORS_DIR"])


@worker_process_init.connect
def warm_predictor(**_: Any) -> None:
    """Load the classifier when a pool process starts, not when the first call of a burst arrives (torch,
    the catalogue and the heads take seconds to load). Missing models are not fatal: the task loads them later."""
    import torch

    torch.set_num_threads(settings.TRIAGE["CLASSIFIER_THREADS"])
    try:
        predictor = load_predictor()
        predictor.predict(["warm-up"])
    except Exception:  # noqa: BLE001 - e.g. `build_models` has not run yet; the task retries the load
        logger.warning("triage predictor not loaded at worker start; loading it on the first task", exc_info=True)
        return
    logger.info("triage predictor %s loaded", predictor.version)


@shared_task(
    **RELIABLE, **TRIAGE_LIMITS, autoretry_for=RETRYABLE, retry_backoff=1, retry_backoff_max=60, retry_jitter=True,
    max_retries=10,
)
def triage_call(call_id: int) -> dict[str, Any]:
    """Classify a call and every other waiting one (micro-batches under bursts), record the verdicts, queue
    them for inference."""
    triage_task_slot_release()
    outcome = call_triage_micro_batch(call_id=call_id, predictor=load_predictor())
    return {"triaged": outcome.triaged_ids, "skipped": outcome.skipped}


@shared_task(
    **RELIABLE, **TRIAGE_LIMITS, autoretry_for=RETRYABLE, retry_backoff=1, retry_backoff_max=60, retry_jitter=True,
    max_retries=10,
)
def retriage_call(call_id: int) -> str:
    """Read a call again after an update added narrative; raise, keep or hold its level."""
    return call_retriage(call_id=call_id, predictor=load_predictor())


@shared_task(**RELIABLE, **TRIAGE_LIMITS, autoretry_for=RETRYABLE, retry_backoff=1, max_retries=10)
def share_incident_guidance(source_ids: list[int]) -> int:
    """Linked calls waiting on the guidance of calls that just ended take it, or generate their own."""
    return incident_guidance_settle(source_ids=source_ids)


@shared_task(**RELIABLE, **TRIAGE_LIMITS, autoretry_for=RETRYABLE, retry_backoff=5, max_retries=3)
def sweep_stuck_calls() -> dict[str, int]:
    """Re-send calls left behind: ``received`` (task lost: broker down, worker killed), ``triaged`` (the
    stream append failed) and, when Redis lost the inference stream, every call it held (``restreamed``).
    ``received`` and ``triaged`` calls newer than SWEEP_STUCK_AFTER_S are left to their own task."""
    restreamed = calls_restream_if_lost()
    cutoff = timezone.now() - timedelta(seconds=settings.TRIAGE["SWEEP_STUCK_AFTER_S"])
    limit = settings.TRIAGE["SWEEP_BATCH_MAX"]
    received = list(
        Call.objects.filter(status=CallStatus.RECEIVED, created_at__lt=cutoff)
        .order_by("created_at").values_list("pk", flat=True)[:limit]
    )
    resent = sum(send_triage_task(call_id) for call_id in received)
    triaged = list(
        Call.objects.filter(status=CallStatus.TRIAGED, triaged_at__lt=cutoff)
        .order_by("triaged_at").values_list("pk", flat=True)[:limit]
    )
    queued = calls_enqueue_or_leave_for_sweep(call_ids=triaged) if triaged else []
    unread = calls_with_unread_narrative(updated_before=cutoff, limit=limit)
    reread = sum(send_retriage_task(call_id) for call_id in unread)
    shared = incident_guidance_settle(source_ids=guidance_sources_ended(limit=limit))  # their task was lost
    escalated = calls_escalate_overdue()
    if received or triaged or unread:
        logger.warning("sweep: re-sent %d of %d received calls, queued %d of %d triaged calls, re-sent %d of %d "
                       "re-triages", resent, len(received), len(queued), len(triaged), reread, len(unread))
    sweep_mark_done()
    metrics.sweep_done(received=len(received), triaged=len(triaged), restreamed=restreamed, ended_at=time.time())
    return {"received": len(received), "resent": resent, "triaged": len(triaged), "queued": len(queued),
            "restreamed": restreamed, "unread_narrative": len(unread), "guidance_shared": shared,
            "escalated": len(escalated)}


# max_retries is only a ceiling over both kinds of retry: a failed POST is retried by the attempt count below
# (WEBHOOK_MAX_ATTEMPTS), a database error (the row could not be written) by autoretry.
@shared_task(bind=True, **RELIABLE, **WEBHOOK_LIMITS, autoretry_for=(DatabaseError,), retry_backoff=5,
             max_retries=30)
def deliver_webhook(self: Any, *, client_id: int, call_id: int, payload: dict[str, Any], attempt: int = 1) -> str:
    """POST one webhook event (attempt ``attempt``); a failed attempt is retried with exponential backoff up to
    WEBHOOK_MAX_ATTEMPTS. The attempt number travels in the message, so each retry is its own row."""
    delivery = webhook_deliver(client_id=client_id, call_id=call_id, payload=payload, attempt=attempt)
    metrics.webhook_attempted(delivery.outcome)
    if delivery.outcome == delivery.Outcome.RETRYING:
        raise self.retry(
            countdown=webhook_backoff_s(attempt),
            kwargs={"client_id": client_id, "call_id": call_id, "payload": payload, "attempt": attempt + 1},
        )
    return delivery.outcome
