from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone

from tests.triage.factories import make_call
from triage.models import AuditEvent, Call, CallStatus
from triage.services.call_updates import call_update_append
from triage.services.calls import call_cancel, call_create, call_transition
from triage.services.errors import Conflict, InvalidTransition
from triage.streams import control_channel

pytestmark = pytest.mark.django_db


def test_call_create_stores_a_received_call_and_its_audit_row(client_and_token):
    client, _ = client_and_token
    call, created = call_create(
        client=client, external_id="A-1", received_at=timezone.now(), transcript="chest pain since an hour"
    )
    assert created and call.status == CallStatus.RECEIVED
    event = AuditEvent.objects.get(call=call)
    assert (event.action, event.to_status, event.actor) == ("call.created", "received", "client:cad-main")


def test_call_create_twice_with_one_external_id_and_body_returns_the_first_call(client_and_token):
    client, _ = client_and_token
    when = timezone.now()
    first, created_first = call_create(client=client, external_id="A-1", received_at=when, transcript="x")
    # the same instant written in another zone is the same body
    again, created_again = call_create(client=client, external_id="A-1", received_at=when.astimezone(ZoneInfo("America/Chicago")),
                                       transcript="x")
    assert (created_first, created_again) == (True, False)
    assert again.pk == first.pk
    assert Call.objects.count() == 1 and AuditEvent.objects.filter(action="call.created").count() == 1


def test_another_body_under_a_used_external_id_is_a_conflict_naming_what_differs(client_and_token):
    client, _ = client_and_token
    when = timezone.now()
    first, _ = call_create(client=client, external_id="A-1", received_at=when, transcript="x", caller_phone="1")
    with pytest.raises(Conflict) as error:
        call_create(client=client, external_id="A-1", received_at=when + timedelta(seconds=1), transcript="y",
                    caller_phone="1")
    assert set(error.value.fields) == {"transcript", "received_at"}
    assert error.value.code == "external_id_reused" and f"calls/{first.pk}/updates/" in error.value.message
    assert Call.objects.get().transcript == "x"


def test_a_retry_of_the_first_post_still_matches_after_updates_grew_the_call(client_and_token):
    client, _ = client_and_token
    when = timezone.now()
    first, _ = call_create(client=client, external_id="A-1", received_at=when, transcript="x", location_lat=1.0,
                           location_lon=2.0)
    call_update_append(call=first, update_id="u1", received_at=when, actor=client, narrative="more",
                       location_lat=1.5, location_lon=2.5)
    again, created = call_create(client=client, external_id="A-1", received_at=when, transcript="x", location_lat=1.0,
                                 location_lon=2.0)
    assert (again.pk, created, again.transcript) == (first.pk, False, "x\nmore")


def test_the_same_external_id_from_two_clients_is_two_calls(make_api_client):
    a, _ = make_api_client()
    b, _ = make_api_client()
    call_create(client=a, external_id="X", received_at=timezone.now(), transcript="t")
    call_create(client=b, external_id="X", received_at=timezone.now(), transcript="t")
    assert Call.objects.count() == 2


def test_call_create_sends_the_triage_task_only_after_commit(client_and_token, django_capture_on_commit_callbacks, monkeypatch):
    sent = []
    monkeypatch.setattr("triage.services.calls.send_triage_task", lambda call_id: sent.append(call_id))
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        call, _ = call_create(client=client_and_token[0], external_id="B", received_at=timezone.now(), transcript="t")
        assert sent == []
    for callback in callbacks:
        callback()
    assert sent == [call.pk]


def test_call_transition_stamps_the_status_time_and_audits_the_actor(dispatcher):
    call = make_call()
    call_transition(call=call, to_status=CallStatus.TRIAGED, actor="system:test")
    call_transition(call=call, to_status=CallStatus.QUEUED, actor="system:test", data={"note": 1})
    call.refresh_from_db()
    assert call.status == CallStatus.QUEUED and call.triaged_at and call.queued_at
    last = AuditEvent.objects.filter(call=call).first()
    assert (last.from_status, last.to_status, last.actor, last.data) == ("triaged", "queued", "system:test", {"note": 1})


def test_call_transition_refuses_a_move_the_lifecycle_does_not_allow():
    call = make_call()
    with pytest.raises(InvalidTransition):
        call_transition(call=call, to_status=CallStatus.DONE, actor="system:test")
    call.refresh_from_db()
    assert call.status == CallStatus.RECEIVED
    assert not AuditEvent.objects.filter(call=call, action="call.done").exists()


def test_call_transition_checks_the_database_state_not_a_stale_instance():
    call = make_call()
    stale = Call.objects.get(pk=call.pk)
    call_transition(call=call, to_status=CallStatus.CANCELLED, actor="system:test")
    with pytest.raises(InvalidTransition):
        call_transition(call=stale, to_status=CallStatus.TRIAGED, actor="system:test")


def test_preemption_counts_and_keeps_the_first_token_time():
    call = make_call()
    for status in ("triaged", "queued", "prefilling", "decoding"):
        call_transition(call=call, to_status=status, actor="system:engine")
    first_token_at = call.first_token_at
    call_transition(call=call, to_status=CallStatus.PREEMPTED, actor="system:engine")
    call_transition(call=call, to_status=CallStatus.DECODING, actor="system:engine")
    call_transition(call=call, to_status=CallStatus.PREEMPTED, actor="system:engine")
    call_transition(
        call=call, to_status=CallStatus.DONE, actor="system:engine", updates={"guidance": "CPR now", "output_tokens": 3}
    )
    call.refresh_from_db()
    assert call.preemption_count == 2 and call.first_token_at == first_token_at
    assert (call.guidance, call.output_tokens, call.status) == ("CPR now", 3, "done")


def test_call_transition_refuses_to_update_other_fields():
    with pytest.raises(ValueError):
        call_transition(call=make_call(), to_status="triaged", actor="x", updates={"level": 1})


def test_call_cancel_publishes_a_cancel_control_message_after_commit(redis_conn, django_capture_on_commit_callbacks):
    call = make_call()
    pubsub = redis_conn.pubsub()
    pubsub.subscribe(control_channel())
    pubsub.get_message(timeout=1)
    with django_capture_on_commit_callbacks(execute=True):
        call_cancel(call=call, actor="system:test", reason="caller hung up")
    message = pubsub.get_message(timeout=2)
    pubsub.close()
    assert message and message["data"] == b'{"kind": "cancel", "call_id": %d}' % call.pk
    assert Call.objects.get(pk=call.pk).cancelled_at is not None


def test_a_finished_call_cannot_be_cancelled():
    call = make_call()
    call_cancel(call=call, actor="system:test")
    with pytest.raises(InvalidTransition):
        call_cancel(call=call, actor="system:test")


def test_received_at_is_kept_as_given():
    when = timezone.now() - timedelta(minutes=3)
    call = make_call()
    call.received_at = when
    assert call_create(client=None, external_id="z", received_at=when, transcript="t")[0].received_at == when
