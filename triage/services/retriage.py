"""Reading a call again after its call system sent new narrative (``call_updates.call_update_append``).

The whole transcript is classified again and the verdict replaces the assessment's reading (reasons, findings,
probabilities). The level moves one way on its own: a more urgent reading raises the call at once (the running
scheduler re-keys it, the call system hears ``call.level_changed``); a less urgent one is *held*, like an
uncertain verdict — the call stays at its level, the assessment names both levels, and a dispatcher confirms
the lower one or keeps the higher (``overrides.call_confirm_level``). A protocol the new reading names, where
the call had another and no dispatcher chose it, is switched to and the guidance generated again.

Tasks may run out of order or twice: each reads ``Call.narrative_revision`` with the transcript, and the record
is dropped when the call has moved on to a newer revision (that update's task reads it) or the assessment has
read this one already.
"""

from __future__ import annotations

import logging
import time
from enum import StrEnum

from django.db import transaction

from judgment.predictors.protocol import UNCLEAR
from judgment.protocols import load_library
from scheduler.config import scheduling_level
from triage.models import SWITCHABLE_STATUSES, AuditAction, Call, CallStatus, TriageAssessment
from triage.realtime import call_changed_on_commit

from .assessments import Prediction, assessment_build, prediction_check, uncertain_against
from .audit import SYSTEM_TRIAGE, Actor, audit_record
from .batching import Predictor
from .overrides import call_level_set
from .protocols import guidance_regenerate
from .webhooks import WebhookEvent, calls_webhook_on_commit

logger = logging.getLogger(__name__)

# What a new reading replaces in the assessment (a dispatcher's override and confirmation stay as they were).
VERDICT_FIELDS = ("predicted_esi", "probabilities", "predicted_output_tokens", "model_version", "latency_ms",
                  "decision_point", "reasons", "uncertain", "alternative_esi", "findings", "catalogue_version",
                  "patient_age", "narrative_revision")
PROTOCOL_FIELDS = ("protocol", "protocol_version", "protocol_confidence", "protocol_likeliest", "protocol_runner_up",
                   "protocol_runner_up_confidence", "protocol_family", "protocol_library")


class RetriageOutcome(StrEnum):
    RAISED = "raised"  # the new reading is more urgent: the level rose at once
    KEPT = "kept"  # the same level; the reasons and findings are the new reading's
    HELD = "held"  # the new reading is less urgent: held at the level until a dispatcher confirms
    STALE = "stale"  # a newer revision's task reads the call, or this revision was read already
    FINISHED = "finished"  # cancelled or closed
    NOT_TRIAGED = "not_triaged"  # no verdict yet: the first triage reads the whole narrative


def held_reason(held: int, verdict: int) -> str:
    """The reason a held call shows: which level it keeps, what the new reading says, and the rule."""
    return (f"Held at ESI {held}: after an update the call reads ESI {verdict}, and only a dispatcher "
            f"lowers a level")


def call_retriage(*, call_id: int, predictor: Predictor) -> RetriageOutcome:
    """Classify the call's whole narrative again and record the verdict (``call_retriage_record``)."""
    row = Call.objects.filter(pk=call_id).values_list("transcript", "narrative_revision").first()
    if row is None:
        return RetriageOutcome.NOT_TRIAGED
    transcript, revision = row
    started = time.perf_counter()
    [prediction] = predictor.predict([transcript])
    return call_retriage_record(
        call_id=call_id, prediction=prediction, revision=revision, model_version=predictor.version,
        latency_ms=(time.perf_counter() - started) * 1000, catalogue_version=predictor.catalogue_version,
    )


def call_retriage_record(
    *,
    call_id: int,
    prediction: Prediction,
    revision: int,
    model_version: str,
    latency_ms: float,
    catalogue_version: str = "",
    actor: Actor = SYSTEM_TRIAGE,
) -> RetriageOutcome:
    """Record the verdict on narrative revision ``revision``: raise, keep or hold the level (module docstring),
    follow a new protocol; an audit row, and on commit the board, the scheduler and the webhook hear of it."""
    with transaction.atomic():
        locked = Call.objects.select_for_update().get(pk=call_id)
        if locked.status == CallStatus.CANCELLED or locked.closed_at is not None:
            return RetriageOutcome.FINISHED
        assessment = TriageAssessment.objects.select_for_update().filter(call=locked).first()
        if assessment is None:
            return RetriageOutcome.NOT_TRIAGED
        if revision != locked.narrative_revision or revision <= assessment.narrative_revision:
            return RetriageOutcome.STALE
        prediction_check(locked, prediction)
        library = load_library()
        fresh = assessment_build(locked, prediction, model_version, latency_ms, catalogue_version, library)
        held, verdict = locked.level, scheduling_level(prediction.esi, uncertain_against(prediction))
        for name in VERDICT_FIELDS:
            setattr(assessment, name, getattr(fresh, name))
        if held is None or verdict < held:
            outcome = RetriageOutcome.RAISED
        elif verdict == held:
            outcome = RetriageOutcome.KEPT
        else:
            outcome = RetriageOutcome.HELD
            assessment.uncertain, assessment.alternative_esi = True, held
            assessment.reasons = [*assessment.reasons, held_reason(held, prediction.esi)]
        if outcome != RetriageOutcome.KEPT:  # a new question for the dispatcher
            assessment.level_confirmed_by, assessment.level_confirmed_at = None, None
        previous_protocol = _protocol_followed(assessment, fresh) if locked.status in SWITCHABLE_STATUSES else None
        assessment.save()
        if outcome == RetriageOutcome.RAISED:
            call_level_set(locked, verdict, reprioritise=True)
            calls_webhook_on_commit([locked], event=WebhookEvent.LEVEL_CHANGED, details={
                "from_esi": held, "change": "retriage", "by": "", "reason": assessment.reasons[0]})
        else:
            call_changed_on_commit(locked.pk)
        audit_record(
            action=AuditAction.CALL_RETRIAGED, actor=actor, call=locked,
            data={"outcome": outcome, "from_level": held, "to_level": locked.level, "verdict_esi": prediction.esi,
                  "narrative_revision": revision, "reasons": assessment.reasons, "findings": assessment.findings,
                  "model_version": model_version, "catalogue_version": catalogue_version},
        )
        if previous_protocol is not None:
            _regenerate_for(locked, assessment, previous_protocol, library.label, actor)
    logger.info("call %s re-triaged on revision %s: %s (ESI %s)", call_id, revision, outcome, locked.level,
                extra={"call_id": call_id, "outcome": str(outcome)})
    return outcome


def _protocol_followed(assessment: TriageAssessment, fresh: TriageAssessment) -> str | None:
    """Take the new reading's protocol when it names one (not ``unclear``) other than the call's and no
    dispatcher chose the call's protocol; the protocol it had, or None when nothing changed."""
    if assessment.protocol_switched_by_id is not None or fresh.protocol in ("", UNCLEAR, assessment.protocol):
        return None
    previous = assessment.protocol
    for name in PROTOCOL_FIELDS:
        setattr(assessment, name, getattr(fresh, name))
    return previous


def _regenerate_for(locked: Call, assessment: TriageAssessment, previous: str, library: str, actor: Actor) -> None:
    """A re-triage switched the protocol: count the generation, audit it, generate the guidance again, tell
    the call system (as a dispatcher's switch does, ``protocols.call_switch_protocol``)."""
    locked.guidance_generation += 1
    locked.save(update_fields=["guidance_generation"])
    audit_record(
        action=AuditAction.CALL_PROTOCOL_SWITCHED, actor=actor, call=locked,
        data={"from": previous, "to": assessment.protocol, "version": assessment.protocol_version,
              "library": library, "generation": locked.guidance_generation, "by": "retriage"},
    )
    guidance_regenerate(locked, actor)
    calls_webhook_on_commit([locked], event=WebhookEvent.PROTOCOL_SWITCHED, details={
        "protocol": assessment.protocol, "from_protocol": previous, "by": "retriage"})
