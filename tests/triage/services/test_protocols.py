import json

import pytest

from tests.fixtures.predictors import ARREST_TRANSCRIPT
from tests.fixtures.services import stream_entries
from tests.triage.factories import make_call
from triage.models import AuditEvent, CallStatus
from triage.selectors.calls import calls_generation_input
from triage.services.assessments import call_triage_record
from triage.services.calls import call_transition
from triage.services.errors import Conflict, DomainError, NotAllowed
from triage.services.generation import CallProgress, calls_generation_record
from triage.services.protocols import call_switch_protocol
from triage.streams import control_channel

pytestmark = pytest.mark.django_db


@pytest.fixture
def triaged_call(triage_predictor, tiers):
    def triaged_call(status: str = CallStatus.TRIAGED):
        call = make_call(transcript=ARREST_TRANSCRIPT)
        [prediction] = triage_predictor.predict([call.transcript])
        call = call_triage_record(call=call, prediction=prediction, model_version=triage_predictor.version, latency_ms=1)
        for step in {CallStatus.TRIAGED: [], CallStatus.QUEUED: [CallStatus.QUEUED],
                     CallStatus.DECODING: [CallStatus.QUEUED, CallStatus.DECODING],
                     CallStatus.DONE: [CallStatus.QUEUED, CallStatus.DECODING, CallStatus.DONE]}[status]:
            call_transition(call=call, to_status=step, actor="system:test")
        return call

    return triaged_call


def _subscribed(redis_conn):
    pubsub = redis_conn.pubsub()
    pubsub.subscribe(control_channel())
    pubsub.get_message(timeout=1)
    return pubsub


def test_a_switch_makes_the_dispatchers_protocol_the_calls_and_audits_it(dispatcher, triaged_call):
    call = triaged_call()
    before = call.assessment.protocol
    call_switch_protocol(call=call, protocol="choking", user=dispatcher)
    call.refresh_from_db()
    assert (call.assessment.protocol, call.assessment.protocol_family) == ("choking", "cardiorespiratory")
    assert call.assessment.protocol_switched_by == dispatcher and call.guidance_generation == 1
    event = AuditEvent.objects.get(call=call, action="call.protocol_switched")
    assert (event.actor, event.data["from"], event.data["to"], event.data["generation"]) == ("user:dora", before, "choking", 1)
    [generation_input] = calls_generation_input(call_ids=[call.pk]).values()
    assert generation_input.plan.protocol == "choking" and "Protocol: choking v" in generation_input.prompt


def test_a_call_being_generated_is_regenerated_by_the_worker_after_commit(
    dispatcher, triaged_call, redis_conn, django_capture_on_commit_callbacks
):
    call = triaged_call(CallStatus.DECODING)
    pubsub = _subscribed(redis_conn)
    with django_capture_on_commit_callbacks(execute=True):
        call_switch_protocol(call=call, protocol="choking", user=dispatcher)
    message = pubsub.get_message(timeout=2)
    pubsub.close()
    assert json.loads(message["data"]) == {"kind": "regenerate", "call_id": call.pk}
    call.refresh_from_db()
    assert call.status == CallStatus.DECODING and call.level == 1  # keeps its level and place


def test_a_finished_call_goes_back_to_the_queue_with_a_new_stream_entry(dispatcher, triaged_call, redis_conn):
    call = triaged_call(CallStatus.DONE)
    call_switch_protocol(call=call, protocol="choking", user=dispatcher)
    call.refresh_from_db()
    assert call.status == CallStatus.QUEUED and call.done_at is None and call.guidance == ""
    assert [e for e in stream_entries(redis_conn) if e["call_id"] == str(call.pk)]
    [generation] = calls_generation_input(call_ids=[call.pk]).values()
    assert "Protocol: choking v" in generation.prompt


def test_the_result_of_the_generation_before_a_switch_is_not_stored(dispatcher, triaged_call):
    call = triaged_call(CallStatus.DECODING)
    call_switch_protocol(call=call, protocol="choking", user=dispatcher)
    stale = CallProgress(call.pk)
    stale.finish(text="old text", output_tokens=3, plan=None, generation=0, off_protocol=0, at=None, reason="eos")
    assert calls_generation_record(progress=[stale]) == []  # not stored: its stream entry stays pending
    call.refresh_from_db()
    assert call.status == CallStatus.DECODING and call.guidance == ""
    [current] = calls_generation_input(call_ids=[call.pk]).values()
    fresh = CallProgress(call.pk)
    fresh.finish(text=current.plan.text, output_tokens=9, plan=current.plan, generation=1, off_protocol=0, at=None,
                 reason="eos")
    assert calls_generation_record(progress=[fresh]) == [call.pk]
    call.refresh_from_db()
    assert (call.status, call.guidance_protocol, call.guidance) == (CallStatus.DONE, "choking", current.plan.text)


def test_a_guidance_with_an_off_protocol_sentence_is_stored_as_the_protocols_own_text(triaged_call):
    call = triaged_call(CallStatus.DECODING)
    [current] = calls_generation_input(call_ids=[call.pk]).values()
    progress = CallProgress(call.pk)
    progress.finish(text="Give him a glass of whisky.", output_tokens=7, plan=current.plan, generation=0,
                    off_protocol=1, at=None, reason="eos")
    calls_generation_record(progress=[progress])
    call.refresh_from_db()
    assert call.guidance == current.plan.text and call.off_protocol_sentences == 1
    done = AuditEvent.objects.get(call=call, action="call.done")
    assert done.data["off_protocol_sentences"] == 1 and done.data["protocol"] == current.plan.protocol


@pytest.mark.parametrize(("protocol", "error"), [("not_a_protocol", DomainError), ("choking", NotAllowed)])
def test_only_a_dispatcher_may_switch_and_only_to_a_library_protocol(make_user, dispatcher, triaged_call, protocol, error):
    user = dispatcher if error is DomainError else make_user("watcher", "admin")
    call = triaged_call()
    with pytest.raises(error) as raised:
        call_switch_protocol(call=call, protocol=protocol, user=user)
    if error is DomainError:
        assert "protocol" in raised.value.fields
    call.refresh_from_db()
    assert call.guidance_generation == 0 and not AuditEvent.objects.filter(call=call, action="call.protocol_switched")


def test_an_untriaged_or_cancelled_call_cannot_switch_and_the_same_protocol_changes_nothing(dispatcher, triaged_call):
    with pytest.raises(Conflict):
        call_switch_protocol(call=make_call(), protocol="choking", user=dispatcher)
    call = triaged_call()
    call_switch_protocol(call=call, protocol="drowning", user=dispatcher)
    call_switch_protocol(call=call, protocol="drowning", user=dispatcher)
    call.refresh_from_db()
    assert call.guidance_generation == 1 and AuditEvent.objects.filter(call=call, action="call.protocol_switched").count() == 1
    call_transition(call=call, to_status=CallStatus.CANCELLED, actor="system:test")
    with pytest.raises(Conflict):
        call_switch_protocol(call=call, protocol="fall", user=dispatcher)


def test_a_finished_calls_replay_holds_only_the_new_generation_after_a_switch(
    dispatcher, triaged_call, redis_conn, django_capture_on_commit_callbacks
):
    from triage.realtime import publish_call_done, publish_tokens, read_token_replay, token_stream_key

    call = triaged_call(CallStatus.DONE)
    redis_conn.delete(token_stream_key(call.pk))
    publish_tokens([(call.pk, 0, "Old words "), (call.pk, 1, "of the first protocol.")])
    publish_call_done(call.pk)
    with django_capture_on_commit_callbacks(execute=True):
        call_switch_protocol(call=call, protocol="choking", user=dispatcher)
    publish_tokens([(call.pk, 0, "New.")])  # the worker numbers the new generation from 0
    replay = read_token_replay(call.pk)
    assert (replay.text, replay.done) == ("New.", False)
    redis_conn.delete(token_stream_key(call.pk))
