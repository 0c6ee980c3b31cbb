"""Micro-batching for the triage task: under a burst, one task classifies many waiting calls at once.

Per-call work dominates under spikes (a model pass and a database write each); a batched pass costs little more
than a single one. A task claims its own call plus other ``received`` calls with
``SELECT ... FOR UPDATE SKIP LOCKED`` (so concurrent workers never claim the same call), lingers up to
``micro_batch_wait_ms`` while the batch is still growing, classifies the batch in one ``predict`` call and
records it, and goes on claiming batches until nothing waits (the web process publishes at most one pending
task per burst: ``send_triage_task``). The tasks of the calls it took find them triaged and return at once
(idempotent).

When more calls wait than one batch takes, a lexical pre-screen of the ESI decision points
(judgment/predictors/screen.py) picks which go first: likely life-threatening calls, then the rest, none
deferred more than ``SCREEN_MAX_DEFER_S``. In a burst the classifier is a queue too, and its order decides
how soon the LLM scheduler even knows a call is urgent. The classifier's queue follows the configured
scheduling policy: an urgency-blind one (``fcfs``, ``sjf``, ``laps``, ``trail``: ``urgency_aware`` is False)
gets arrival order here as well, so a policy is one order from intake to the last token.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from scheduler.policies import POLICIES
from triage.models import Call, CallStatus, SchedulerSettings, TriageAssessment

from .assessments import Prediction, calls_enqueue_or_leave_for_sweep, calls_triage_record
from .audit import SYSTEM_TRIAGE
from .calls import call_transition
from .dispatch import send_triage_task
from .incidents import calls_link

LINGER_STEP_S = 0.01
# A burst's backlog is ranked by the lexical pre-screen (judgment/predictors/screen.py) in windows of this
# many oldest waiting calls; a call is never deferred past SCREEN_MAX_DEFER_S (then arrival order rules).
SCREEN_WINDOW = 512
SCREEN_MAX_DEFER_S = 5.0
_SCREEN_CACHE: dict[int, int] = {}  # call id -> screen score, per Celery process
MAX_DRAIN_BATCHES = 50  # one task classifies at most this many batches before handing over
# What a classifier raises for an input it cannot take (as opposed to being broken itself).
INPUT_ERRORS = (ValueError, TypeError, UnicodeError)
logger = logging.getLogger(__name__)


class Predictor(Protocol):
    version: str
    catalogue_version: str

    def predict(self, transcripts: Sequence[str]) -> Sequence[Prediction]: ...


@dataclass
class BatchOutcome:
    triaged_ids: list[int] = field(default_factory=list)
    skipped: str = ""  # why the task had nothing to do


def call_triage_micro_batch(*, call_id: int, predictor: Predictor) -> BatchOutcome:
    """Triage ``call_id``, then every other waiting call, in micro-batches of at most ``micro_batch_max``.

    Draining is what makes the coalesced publish of ``send_triage_task`` safe: this task also stands for the
    calls whose publish it absorbed. Safe to run twice, and beside other workers (``SKIP LOCKED``)."""
    outcome = BatchOutcome()
    scheduler_settings = SchedulerSettings.current()
    status = Call.objects.filter(pk=call_id).values_list("status", flat=True).first()
    if status == CallStatus.TRIAGED:  # a retry after the enqueue step failed
        calls_enqueue_or_leave_for_sweep(call_ids=[call_id])
        outcome.skipped = "already triaged"
    elif status != CallStatus.RECEIVED:
        outcome.skipped = f"status {status}"
    else:
        own = _triage_one_batch(call_id, predictor, scheduler_settings)
        if own is None:
            outcome.skipped = "claimed by another worker"
        else:
            outcome.triaged_ids += own
    for _ in range(MAX_DRAIN_BATCHES):
        more = _triage_one_batch(None, predictor, scheduler_settings)
        if not more:
            return outcome
        outcome.triaged_ids += more
    send_triage_task(call_id)  # still more: hand the rest to a fresh task rather than hold this worker
    return outcome


def _triage_one_batch(call_id: int | None, predictor: Predictor, scheduler_settings: SchedulerSettings) -> list[int] | None:
    """Claim a batch (with ``call_id`` first, if given), classify and record it; the ids triaged. None: the
    given call is held by another worker; []: nothing was waiting."""
    claim_started = time.perf_counter()
    with transaction.atomic():
        batch = _claim(call_id, scheduler_settings.micro_batch_max, scheduler_settings.micro_batch_wait_ms / 1000, _screens(scheduler_settings.policy))
        if not batch:
            return None if call_id is not None else []
        started = time.perf_counter()
        batch, predictions = _predict(batch, predictor)
        predicted = time.perf_counter()
        latency_ms = (predicted - started) * 1000 / max(1, len(batch))
        if batch:
            recorded = calls_triage_record(
                calls=batch, predictions=predictions, model_version=predictor.version, latency_ms=latency_ms,
                catalogue_version=predictor.catalogue_version,
            )
            # in the same transaction: the enqueue that runs on commit sees which calls follow another's guidance
            if settings.TRIAGE["LINK_CALLS"]:
                calls_link(recorded, {a.call_id: a for a in TriageAssessment.objects.filter(call__in=recorded)})
    logger.info(
        "triaged %d calls: claim %.0f ms, classify %.0f ms, record %.0f ms", len(batch),
        (started - claim_started) * 1e3, (predicted - started) * 1e3, (time.perf_counter() - predicted) * 1e3,
    )
    return [call.pk for call in batch]


def _predict(batch: list[Call], predictor: Predictor) -> tuple[list[Call], list[Prediction]]:
    """One batched call; if the classifier rejects an input, one call at a time, and a call it cannot take
    fails (``received → failed``, with the reason) instead of poisoning every batch the sweep puts it in.
    Other errors (the classifier itself is broken) propagate: the task fails, the calls stay ``received``."""
    try:
        return batch, list(predictor.predict([call.transcript for call in batch]))
    except INPUT_ERRORS:
        logger.exception("batched classification of %d calls failed; classifying one by one", len(batch))
    kept, predictions = [], []
    for call in batch:
        try:
            [prediction] = predictor.predict([call.transcript])
        except INPUT_ERRORS as exc:  # this call's own input breaks the classifier
            call_transition(
                call=call, to_status=CallStatus.FAILED, actor=SYSTEM_TRIAGE,
                updates={"failure_reason": f"classifier error: {exc!r}"[:300]},
            )
            continue
        kept.append(call)
        predictions.append(prediction)
    return kept, predictions


def _screens(policy: str) -> bool:
    """Whether the backlog is ranked by the pre-screen: the policy orders by urgency (unknown names do)."""
    cls = POLICIES.get(policy)
    return cls is None or cls.urgency_aware


def _claim(call_id: int | None, batch_max: int, wait_s: float, screen: bool) -> list[Call]:
    """Lock ``call_id`` (if given) and other waiting calls up to ``batch_max`` (pre-screened or oldest first),
    lingering while the batch grows. Must run inside a transaction; returns [] when another worker holds
    ``call_id`` or nothing waits."""
    batch = list(_waiting().filter(pk=call_id)) if call_id is not None else []
    if call_id is not None and not batch:
        return []
    deadline = time.monotonic() + wait_s
    more = _take_more(batch, batch_max, screen)
    if not batch:
        return []
    while more and len(batch) < batch_max and time.monotonic() < deadline:
        time.sleep(LINGER_STEP_S)  # a burst is in progress: give its other calls a moment to commit
        more = _take_more(batch, batch_max, screen)
    return batch


def _waiting():  # noqa: ANN202
    return Call.objects.select_for_update(skip_locked=True).filter(status=CallStatus.RECEIVED)


def _take_more(batch: list[Call], batch_max: int, screen: bool) -> list[Call]:
    """Lock up to the batch's room of other waiting calls: with ``screen``, overdue ones (waiting longer than
    ``SCREEN_MAX_DEFER_S``) in arrival order, then by the lexical pre-screen (likely ESI 1-2 first), then
    oldest; without, oldest. Only a backlog larger than the room is ranked, so quiet times stay plain FIFO."""
    room = batch_max - len(batch)
    if room <= 0:
        return []
    taken = [c.pk for c in batch]
    window = list(
        Call.objects.filter(status=CallStatus.RECEIVED).exclude(pk__in=taken)
        .order_by("created_at", "pk").values_list("pk", "created_at")[: SCREEN_WINDOW if screen else room]
    )
    if len(window) > room:  # only with screen: otherwise the query took no more than the room
        window = _ranked_for_triage(window)[:room]
    more = list(_waiting().filter(pk__in=[pk for pk, _ in window]).order_by("created_at", "pk"))
    batch.extend(more)
    return more


def _ranked_for_triage(window: list[tuple[int, datetime]]) -> list[tuple[int, datetime]]:
    """Sort (pk, created_at) rows for claiming. Transcripts are read once per call: the linger loop ranks the
    same backlog every few milliseconds, and scores are kept per process."""
    from judgment.predictors.screen import screen_score  # regexes only; Celery's import, not the web's

    unscored = [pk for pk, _ in window if pk not in _SCREEN_CACHE]
    if unscored:
        if len(_SCREEN_CACHE) + len(unscored) > SCREEN_WINDOW * 8:
            _SCREEN_CACHE.clear()
            unscored = [pk for pk, _ in window]
        for pk, transcript in Call.objects.filter(pk__in=unscored).values_list("pk", "transcript"):
            _SCREEN_CACHE[pk] = screen_score(transcript)
    overdue_before = timezone.now() - timedelta(seconds=SCREEN_MAX_DEFER_S)

    def rank(row: tuple[int, datetime]) -> tuple:
        pk, created_at = row
        if created_at < overdue_before:
            return (0, 0, created_at, pk)
        return (1, -_SCREEN_CACHE.get(pk, 0), created_at, pk)

    return sorted(window, key=rank)
