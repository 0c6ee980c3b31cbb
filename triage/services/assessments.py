"""Triage results: store the classifiers' verdict, then hand the call to the inference stream.

Two steps, two transactions, so that ``triaged`` means "assessed, not yet in the inference stream":

1. ``calls_triage_record``: assessment + level + tier, ``received → triaged``, audit rows. On commit it runs
2. ``calls_enqueue``: ``triaged → queued`` and the XADD of the stream entries (docs/architecture.md §2b). The XADD is
   the last statement before COMMIT, made while the call rows are locked: if Redis refuses, the transaction
   rolls back and the call stays ``triaged`` for the sweep to re-append; the inference worker's own
   transitions (``call_transition`` locks the row) wait for that commit, so the worker never acts on an
   entry whose call is not yet ``queued``. A commit that fails after a successful XADD leaves a duplicate
   entry for a ``triaged`` call, which the worker's transition refuses; the sweep re-appends it later.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from typing import Protocol

import redis
from django.db import transaction
from django.utils import timezone

from judgment.predictors.protocol import ProtocolChoice
from judgment.protocols import ProtocolLibrary, load_library
from scheduler.config import scheduling_level, tier_claiming
from triage.contracts import StreamEntry
from triage.metrics import calls_triaged
from triage.models import (
    ESI_LEVELS,
    AuditAction,
    AuditEvent,
    Call,
    CallStatus,
    DecisionPoint,
    Tier,
    TriageAssessment,
)
from triage.realtime import call_changed_on_commit
from triage.streams import stream_append_many

from .audit import SYSTEM_TRIAGE, Actor, audit_event_build
from .calls import call_transition_unsaved
from .dispatch import send_share_guidance_task
from .errors import DomainError
from .webhooks import calls_webhook_on_commit

logger = logging.getLogger(__name__)

# The guidance LLM retokenizes the prompt; the stream carries an estimate for the scheduler's first
# cost guess. ~4 characters per token is the usual rule of thumb for English BPE vocabularies.


class Prediction(Protocol):
    """What ``judgment.predictors.TriagePredictor.predict`` returns for one transcript."""

    esi: int
    probabilities: Sequence[float]
    predicted_output_tokens: int
    decision_point: str
    reasons: Sequence[str]
    uncertain: bool
    alternative_esi: int | None
    findings: Sequence[str]
    protocol: ProtocolChoice | None
    patient_age: float | None


def tier_for_level(level: int, tiers: Iterable[Tier] | None = None) -> Tier | None:
    """The tier that claims ``level`` (``scheduler.config.tier_claiming``, over the tiers in sort order)."""
    return tier_claiming(level, tiers if tiers is not None else Tier.objects.all(), lambda tier: tier.esi_levels or [])


def uncertain_against(prediction: Prediction) -> int | None:
    """The other level an uncertain verdict named (None when the verdict is certain or names none)."""
    return prediction.alternative_esi if prediction.uncertain else None


def prediction_check(call: Call, prediction: Prediction) -> None:
    probabilities = list(prediction.probabilities)
    if prediction.esi not in ESI_LEVELS or len(probabilities) != len(ESI_LEVELS):
        raise DomainError(f"invalid prediction for call {call.pk}", fields={"esi": [f"got {prediction.esi}"]})
    if uncertain_against(prediction) not in (None, *ESI_LEVELS):
        raise DomainError(f"invalid prediction for call {call.pk}",
                          fields={"alternative_esi": [f"got {prediction.alternative_esi}"]})
    if prediction.decision_point not in DecisionPoint.values or not list(prediction.reasons):
        raise DomainError(
            f"invalid prediction for call {call.pk}",
            fields={"decision_point": [f"got {prediction.decision_point!r} with {len(list(prediction.reasons))} reasons"]},
        )


def calls_triage_record(
    *,
    calls: Sequence[Call],
    predictions: Sequence[Prediction],
    model_version: str,
    latency_ms: float,
    catalogue_version: str = "",
    actor: Actor = SYSTEM_TRIAGE,
) -> list[Call]:
    """Record one micro-batch of verdicts: ``received → triaged``, then (on commit) ``triaged → queued``.

    A call uncertain between two levels is scheduled (``Call.level``) at the more urgent of the two until a
    dispatcher confirms one (``call_confirm_level``) or overrides it; the assessment keeps the verdict.

    ``latency_ms`` is the classifier time per call in the batch. Every call must be ``received``.
    """
    if len(calls) != len(predictions):
        raise ValueError("one prediction per call")
    by_id = dict(zip((c.pk for c in calls), predictions, strict=True))
    tiers = list(Tier.objects.all())
    with transaction.atomic():
        locked = list(Call.objects.select_for_update().filter(pk__in=by_id).order_by("pk"))
        now = timezone.now()
        assessments, audits, changed = [], [], {"level", "tier"}
        library = load_library()
        for call in locked:
            prediction = by_id[call.pk]
            prediction_check(call, prediction)
            changed.update(call_transition_unsaved(call, CallStatus.TRIAGED, now=now))
            call.level = scheduling_level(prediction.esi, uncertain_against(prediction))
            call.tier = tier_for_level(call.level, tiers)
            assessments.append(assessment_build(call, prediction, model_version, latency_ms, catalogue_version, library))
            audits.append(_triaged_audit(call, prediction, model_version, catalogue_version, actor))
            call_changed_on_commit(call.pk)
        TriageAssessment.objects.bulk_create(assessments)
        Call.objects.bulk_update(locked, sorted(changed))
        AuditEvent.objects.bulk_create(audits)
        calls_webhook_on_commit(locked, status=CallStatus.TRIAGED)
        call_ids = [c.pk for c in locked]
        waits = [(c.level, (now - c.created_at).total_seconds()) for c in locked]
        transaction.on_commit(lambda: calls_triaged(waits))
        transaction.on_commit(lambda: calls_enqueue_or_leave_for_sweep(call_ids=call_ids))
    return locked


def assessment_build(
    call: Call, prediction: Prediction, model_version: str, latency_ms: float, catalogue_version: str,
    library: ProtocolLibrary,
) -> TriageAssessment:
    return TriageAssessment(
        **protocol_fields(prediction.protocol, library),
        patient_age=prediction.patient_age,
        call=call,
        predicted_esi=prediction.esi,
        probabilities=[round(float(p), 6) for p in prediction.probabilities],
        predicted_output_tokens=int(prediction.predicted_output_tokens),
        model_version=model_version,
        latency_ms=latency_ms,
        decision_point=prediction.decision_point,
        reasons=[str(r) for r in prediction.reasons],
        uncertain=bool(prediction.uncertain),
        alternative_esi=uncertain_against(prediction),
        findings=[str(f) for f in prediction.findings],
        catalogue_version=catalogue_version,
        narrative_revision=call.narrative_revision,
    )


def protocol_fields(choice: ProtocolChoice | None, library: ProtocolLibrary) -> dict:
    """The selection as stored: the protocol's version and family from the library the guidance will read."""
    if choice is None:
        return {}
    likeliest = library.protocols.get(choice.likeliest)
    return {
        "protocol": choice.protocol, "protocol_version": library.version_of(choice.protocol),
        "protocol_confidence": round(choice.confidence, 4), "protocol_likeliest": choice.likeliest,
        "protocol_runner_up": choice.runner_up, "protocol_runner_up_confidence": round(choice.runner_up_confidence, 4),
        "protocol_family": likeliest.family if likeliest else "unknown", "protocol_library": library.label,
    }


def _triaged_audit(
    call: Call, prediction: Prediction, model_version: str, catalogue_version: str, actor: Actor
) -> AuditEvent:
    return audit_event_build(
        action=AuditAction.CALL_TRIAGED,
        actor=actor,
        call=call,
        from_status=CallStatus.RECEIVED,
        to_status=CallStatus.TRIAGED,
        data={
            "esi": prediction.esi, "decision_point": prediction.decision_point,
            "reasons": [str(r) for r in prediction.reasons], "uncertain": bool(prediction.uncertain),
            "alternative_esi": uncertain_against(prediction), "scheduled_level": call.level,
            "model_version": model_version, "catalogue_version": catalogue_version,
            "protocol": prediction.protocol.protocol if prediction.protocol else None,
            "protocol_confidence": round(prediction.protocol.confidence, 4) if prediction.protocol else None,
        },
    )


def call_triage_record(
    *,
    call: Call,
    prediction: Prediction,
    model_version: str,
    latency_ms: float,
    catalogue_version: str = "",
    actor: Actor = SYSTEM_TRIAGE,
) -> Call:
    """Record one call's verdict (see ``calls_triage_record``)."""
    (recorded,) = calls_triage_record(
        calls=[call], predictions=[prediction], model_version=model_version, latency_ms=latency_ms,
        catalogue_version=catalogue_version, actor=actor,
    )
    return recorded


def calls_enqueue(*, call_ids: Sequence[int], actor: Actor = SYSTEM_TRIAGE) -> list[Call]:
    """``triaged → queued`` and append one inference-stream entry per call (see the module docstring).

    Calls that are no longer ``triaged`` are skipped. Raises ``redis.RedisError`` (nothing changed) when
    Redis refuses the entries.
    """
    with transaction.atomic():
        calls = list(
            Call.objects.select_for_update(of=("self",))
            .select_related("tier", "assessment")
            .filter(pk__in=call_ids, status=CallStatus.TRIAGED)
            .order_by("pk")
        )
        if not calls:
            return []
        now = timezone.now()
        changed: set[str] = set()
        audits = []
        for call in calls:
            changed.update(call_transition_unsaved(call, CallStatus.QUEUED, now=now))
            audits.append(
                audit_event_build(
                    action=AuditAction.CALL_QUEUED, actor=actor, call=call,
                    from_status=CallStatus.TRIAGED, to_status=CallStatus.QUEUED,
                )
            )
            call_changed_on_commit(call.pk)
        Call.objects.bulk_update(calls, sorted(changed))
        AuditEvent.objects.bulk_create(audits)
        # A linked call that follows another's guidance gets no entry: it takes that guidance when it is done.
        entries = [inference_entry(call, enqueued_at=time.time()) for call in calls if call.guidance_source_id is None]
        if entries:
            stream_append_many(entries)
        sources = sorted({call.guidance_source_id for call in calls if call.guidance_source_id is not None})
        if sources:  # a source that has ended already: settle now (one still running settles when it ends)
            transaction.on_commit(lambda: send_share_guidance_task(sources))
    return calls


def calls_enqueue_or_leave_for_sweep(*, call_ids: Sequence[int]) -> list[Call]:
    try:
        return calls_enqueue(call_ids=call_ids)
    except redis.RedisError:
        logger.warning("inference stream unreachable; calls %s stay triaged for the sweep", list(call_ids))
        return []


def inference_entry(call: Call, *, enqueued_at: float) -> StreamEntry:
    """The call's inference-stream entry: its level and predicted length stand in until the worker reads the call."""
    assessment = getattr(call, "assessment", None)  # a call put back from the database may lack one
    values = {"level": call.level} if call.level else {}
    if assessment is not None:
        values["predicted_output_tokens"] = assessment.predicted_output_tokens
    return StreamEntry(call_id=call.pk, enqueued_at=enqueued_at, accepted_at=call.created_at.timestamp(), **values)
