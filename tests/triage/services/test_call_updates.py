"""Calls that evolve: updates are stored as posted, applied to the call, audited, idempotent per update id,
and new narrative on a triaged call is read again after the commit."""

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.triage.factories import make_call
from triage.models import AuditEvent, CallStatus, CallUpdate
from triage.services.assessments import call_triage_record
from triage.services.call_updates import call_update_append, narrative_max_chars
from triage.services.calls import call_cancel
from triage.services.errors import Conflict, DomainError

pytestmark = pytest.mark.django_db


@pytest.fixture
def sent(monkeypatch):
    """The calls whose re-triage task was published (the broker itself is tested by the worker tests)."""
    sent: list[int] = []
    monkeypatch.setattr("triage.services.call_updates.send_retriage_task", sent.append)
    return sent


def test_an_update_appends_narrative_moves_the_location_and_takes_the_callback_number(client_and_token):
    client, _ = client_and_token
    call = make_call(client, transcript="my neighbour is not well", location_address="12 High Street, Leeds")
    update, created = call_update_append(
        call=call, update_id="u1", received_at=timezone.now(), actor=client, narrative="she fell off a ladder",
        location_lat=53.81, location_lon=-1.56, location_uncertainty_m=35.0, callback_number="+44 113 000",
    )
    call.refresh_from_db()
    assert created and update.narrative_revision == 1
    assert call.transcript == "my neighbour is not well\nshe fell off a ladder" and call.narrative_revision == 1
    assert (call.location_lat, call.location_lon, call.location_uncertainty_m) == (53.81, -1.56, 35.0)
    assert call.location_address == "12 High Street, Leeds"  # an update replaces only what it gives
    assert call.caller_phone == "+44 113 000"
    audit = AuditEvent.objects.get(call=call, action="call.updated")
    assert audit.actor == "client:cad-main"
    assert audit.data == {"update_id": "u1", "narrative_revision": 1, "fields": [
        "caller_phone", "location_lat", "location_lon", "location_uncertainty_m", "narrative_revision", "transcript"]}


def test_a_retried_update_returns_the_stored_one_and_changes_nothing_more(client_and_token):
    client, _ = client_and_token
    call = make_call(client, transcript="t")
    when = timezone.now()
    first, _ = call_update_append(call=call, update_id="u1", received_at=when, actor=client, narrative="more")
    again, created = call_update_append(call=call, update_id="u1", received_at=when, actor=client, narrative="more")
    call.refresh_from_db()
    assert (again.pk, created) == (first.pk, False)
    assert call.transcript == "t\nmore" and call.narrative_revision == 1
    assert AuditEvent.objects.filter(call=call, action="call.updated").count() == 1


def test_another_update_under_a_used_update_id_is_a_conflict_naming_what_differs(client_and_token):
    client, _ = client_and_token
    call = make_call(client, transcript="t")
    when = timezone.now()
    call_update_append(call=call, update_id="u1", received_at=when, actor=client, narrative="more")
    with pytest.raises(Conflict) as error:
        call_update_append(call=call, update_id="u1", received_at=when + timedelta(seconds=1), actor=client,
                           narrative="other")
    assert set(error.value.fields) == {"received_at", "narrative"} and error.value.code == "update_id_reused"
    assert CallUpdate.objects.filter(call=call).count() == 1


def test_a_cancelled_call_takes_no_updates(client_and_token):
    client, _ = client_and_token
    call = make_call(client)
    call_cancel(call=call, actor=client)
    with pytest.raises(Conflict, match="cancelled call"):
        call_update_append(call=call, update_id="u1", received_at=timezone.now(), actor=client, narrative="x")
    assert not CallUpdate.objects.exists()


def test_narrative_that_would_grow_the_transcript_past_its_bound_is_refused_naming_the_field(client_and_token, settings):
    client, _ = client_and_token
    settings.TRIAGE = {**settings.TRIAGE, "TRANSCRIPT_MAX_CHARS": 10}
    call = make_call(client, transcript="0123456789")
    for i in range(3):
        call_update_append(call=call, update_id=f"u{i}", received_at=timezone.now(), actor=client, narrative="012345678")
    with pytest.raises(DomainError) as error:
        call_update_append(call=call, update_id="u9", received_at=timezone.now(), actor=client, narrative="012345678")
    assert list(error.value.fields) == ["narrative"] and str(narrative_max_chars()) in error.value.message
    call.refresh_from_db()
    assert call.narrative_revision == 3


def test_narrative_on_a_triaged_call_is_read_again_after_the_commit(client_and_token, triage_predictor, sent,
                                                                    django_capture_on_commit_callbacks):
    client, _ = client_and_token
    call = make_call(client, transcript="my neighbour is not well")
    [prediction] = triage_predictor.predict([call.transcript])
    call_triage_record(call=call, prediction=prediction, model_version="m", latency_ms=1)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        call_update_append(call=call, update_id="u1", received_at=timezone.now(), actor=client, narrative="she fell")
        assert sent == []
    for callback in callbacks:
        callback()
    assert sent == [call.pk]


def test_an_update_without_narrative_or_before_triage_sends_no_re_triage(client_and_token, sent,
                                                                           django_capture_on_commit_callbacks):
    client, _ = client_and_token
    call = make_call(client, transcript="my neighbour is not well")
    assert call.status == CallStatus.RECEIVED
    with django_capture_on_commit_callbacks(execute=True):
        # not triaged yet: the triage task will read the whole narrative
        call_update_append(call=call, update_id="u1", received_at=timezone.now(), actor=client, narrative="she fell")
        call_update_append(call=call, update_id="u2", received_at=timezone.now(), actor=client, callback_number="1")
    assert sent == []
