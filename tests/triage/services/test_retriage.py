"""Re-triage after new narrative, with the trained predictors: a more urgent reading raises the level at once,
a less urgent one is held for a dispatcher, a new protocol is followed unless a dispatcher chose one, and a
task that read an older narrative records nothing."""

import dataclasses
import json

import pytest
from django.utils import timezone

from tests.triage.factories import make_call
from triage.models import AuditEvent, Call, CallStatus
from triage.services.assessments import call_triage_record
from triage.services.call_updates import call_update_append
from triage.services.overrides import call_confirm_level
from triage.services.protocols import call_switch_protocol
from triage.services.retriage import RetriageOutcome, call_retriage, call_retriage_record
from triage.streams import control_channel

pytestmark = pytest.mark.django_db

# Read by the tiny trained bundle: ESI 5, protocol unclear; with the fall, more urgent (ESI 2, or 3) and "fall".
UNWELL = "my neighbour is not well"
FELL = "she fell off a ladder and broke her arm, it is bent"
ARREST = "my husband collapsed, he is not breathing, no pulse, I am doing CPR"


@pytest.fixture
def triaged(client_and_token, triage_predictor, monkeypatch):
    """A call triaged by the trained predictors from ``transcript``; the re-triage task is run by the test."""
    monkeypatch.setattr("triage.services.call_updates.send_retriage_task", lambda call_id: True)

    def triaged(transcript: str) -> Call:
        call = make_call(client_and_token[0], transcript=transcript)
        [prediction] = triage_predictor.predict([call.transcript])
        return call_triage_record(call=call, prediction=prediction, model_version=triage_predictor.version,
                                  latency_ms=1)

    return triaged


def _update(call: Call, update_id: str, narrative: str) -> None:
    call_update_append(call=call, update_id=update_id, received_at=timezone.now(), actor="system:test",
                       narrative=narrative)


def test_new_narrative_that_reads_more_urgent_raises_the_level_at_once_and_re_keys_the_scheduler(
    triaged, triage_predictor, tiers, redis_conn, django_capture_on_commit_callbacks,
):
    call = triaged(UNWELL)
    before = call.level
    assert before >= 4  # a vague complaint; the learned model alone places it at 4 or 5
    _update(call, "u1", ARREST)
    pubsub = redis_conn.pubsub()
    pubsub.subscribe(control_channel())
    pubsub.get_message(timeout=1)
    with django_capture_on_commit_callbacks(execute=True):
        outcome = call_retriage(call_id=call.pk, predictor=triage_predictor)
    message = pubsub.get_message(timeout=2)
    pubsub.close()
    call.refresh_from_db()
    assert outcome == RetriageOutcome.RAISED and call.level == 1 and call.tier.name == "Immediate"
    assert json.loads(message["data"]) == {"kind": "reprioritise", "call_id": call.pk, "level": 1, "tier": "Immediate"}
    assert call.assessment.narrative_revision == 1 and call.assessment.reasons[0].startswith("A: not breathing")
    audit = AuditEvent.objects.get(call=call, action="call.retriaged")
    assert (audit.actor, audit.data["outcome"], audit.data["from_level"], audit.data["to_level"]) == (
        "system:triage", "raised", before, 1)


def test_a_less_urgent_reading_is_held_until_a_dispatcher_confirms_the_lower_level(triaged, triage_predictor, dispatcher):
    call = triaged(ARREST)
    assert call.level == 1
    _update(call, "u1", "sorry, false alarm, he fainted for a second and he is up and talking normally now")
    [prediction] = triage_predictor.predict([Call.objects.get(pk=call.pk).transcript])
    less_urgent = dataclasses.replace(prediction, esi=4, uncertain=False, alternative_esi=None)
    outcome = call_retriage_record(call_id=call.pk, prediction=less_urgent, revision=1, model_version="m", latency_ms=1)
    call.refresh_from_db()
    assessment = call.assessment
    assert outcome == RetriageOutcome.HELD and call.level == 1
    assert (assessment.predicted_esi, assessment.alternative_esi, assessment.awaiting_confirmation) == (4, 1, True)
    assert assessment.reasons[-1] == "Held at ESI 1: after an update the call reads ESI 4, and only a dispatcher lowers a level"
    call_confirm_level(call=call, level=4, user=dispatcher)
    call.refresh_from_db()
    assert call.level == 4


def test_a_new_protocol_is_followed_and_the_guidance_generated_again(triaged, triage_predictor, redis_conn,
                                                                     django_capture_on_commit_callbacks):
    call = triaged(UNWELL)
    Call.objects.filter(pk=call.pk).update(status=CallStatus.DECODING)  # being generated under "unclear"
    assert call.assessment.protocol == "unclear"
    _update(call, "u1", FELL)
    pubsub = redis_conn.pubsub()
    pubsub.subscribe(control_channel())
    pubsub.get_message(timeout=1)
    with django_capture_on_commit_callbacks(execute=True):
        outcome = call_retriage(call_id=call.pk, predictor=triage_predictor)
    messages = [pubsub.get_message(timeout=2) for _ in range(2)]
    pubsub.close()
    call.refresh_from_db()
    assert outcome == RetriageOutcome.RAISED and call.level in (2, 3)
    assert call.assessment.protocol == "fall" and call.guidance_generation == 1
    kinds = [json.loads(m["data"])["kind"] for m in messages if m]
    assert sorted(kinds) == ["regenerate", "reprioritise"]
    switched = AuditEvent.objects.get(call=call, action="call.protocol_switched")
    assert (switched.data["from"], switched.data["to"], switched.data["by"]) == ("unclear", "fall", "retriage")


def test_a_protocol_a_dispatcher_chose_is_kept(triaged, triage_predictor, dispatcher):
    call = triaged(UNWELL)
    call_switch_protocol(call=call, protocol="sick_person", user=dispatcher)
    _update(call, "u1", FELL)
    call_retriage(call_id=call.pk, predictor=triage_predictor)
    call.refresh_from_db()
    assert call.assessment.protocol == "sick_person" and call.guidance_generation == 1


def test_a_task_that_read_an_older_narrative_records_nothing(triaged, triage_predictor):
    call = triaged(UNWELL)
    _update(call, "u1", FELL)
    _update(call, "u2", ARREST)
    [prediction] = triage_predictor.predict([UNWELL + "\n" + FELL])
    assert call_retriage_record(call_id=call.pk, prediction=prediction, revision=1, model_version="m",
                                latency_ms=1) == RetriageOutcome.STALE
    assert call_retriage(call_id=call.pk, predictor=triage_predictor) == RetriageOutcome.RAISED
    assert call_retriage(call_id=call.pk, predictor=triage_predictor) == RetriageOutcome.STALE  # read already
    assert AuditEvent.objects.filter(call=call, action="call.retriaged").count() == 1
    assert Call.objects.get(pk=call.pk).level == 1
