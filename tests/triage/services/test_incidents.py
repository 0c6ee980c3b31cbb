"""Linked calls through the triage task and the services, with the trained predictors: callers about one event
join one incident; a later call of the same protocol takes the first one's guidance instead of generating it
(no stream entry, no tokens); it generates its own when its source is cancelled or a dispatcher splits it out;
a dispatcher confirms a link."""

import pytest
from django.utils import timezone

from tests.fixtures.services import stream_entries
from tests.triage.factories import make_call
from triage.models import AuditEvent, Call, CallStatus
from triage.services.calls import call_cancel, call_transition
from triage.services.errors import NotAllowed
from triage.services.incidents import call_incident_confirm, call_incident_split, incident_guidance_settle
from triage.tasks import triage_call

pytestmark = pytest.mark.django_db

SITE = {"location_lat": 53.7962, "location_lon": -1.5371, "location_address": ""}
NEARBY = {"location_lat": 53.7964, "location_lon": -1.5373, "location_address": ""}  # ~25 m away
FIRST = "A man has just collapsed at the bus station by stand 12, he's not breathing, someone is doing CPR"
SECOND = "somebody's collapsed at the bus station, he's not breathing, is an ambulance coming"
NEXT_DOOR = "My daughter has a high temperature and a rash that doesn't fade when I press a glass on it"


@pytest.fixture
def burst(recording_predictor, redis_conn, django_capture_on_commit_callbacks, monkeypatch):
    """Three calls at one bus station (two about one collapse, one about a sick child), triaged by the task."""
    monkeypatch.setattr("triage.services.assessments.send_share_guidance_task", lambda ids: True)
    first = make_call(transcript=FIRST, **SITE)
    second = make_call(transcript=SECOND, **NEARBY)
    other = make_call(transcript=NEXT_DOOR, **NEARBY)
    with django_capture_on_commit_callbacks(execute=True):
        triage_call.run(first.pk)
    return [Call.objects.select_related("assessment").get(pk=c.pk) for c in (first, second, other)]


def _finish(call: Call, guidance: str) -> None:
    for status in (CallStatus.PREFILLING, CallStatus.DECODING):
        call_transition(call=call, to_status=status, actor="system:inference")
    call_transition(call=call, to_status=CallStatus.DONE, actor="system:inference",
                    updates={"guidance": guidance, "output_tokens": 9, "done_at": timezone.now()})


def test_callers_about_one_event_join_one_incident_and_the_later_shares_the_guidance(burst, redis_conn):
    first, second, other = burst
    assert second.incident_id is not None and second.incident_id == first.incident_id
    assert other.incident_id is None  # same place, another emergency
    assert second.assessment.protocol == first.assessment.protocol
    assert second.guidance_source_id == first.pk and second.status == CallStatus.QUEUED
    assert sorted(int(e["call_id"]) for e in stream_entries(redis_conn)) == [first.pk, other.pk]  # no entry of its own
    linked = AuditEvent.objects.get(call=second, action="call.linked")
    assert (linked.actor, linked.data["with"], linked.data["guidance_from"]) == ("system:triage", first.pk, first.pk)

    _finish(first, "Start chest compressions now. Push hard and fast.")
    assert incident_guidance_settle(source_ids=[first.pk]) == 1
    second.refresh_from_db()
    assert second.status == CallStatus.DONE and second.output_tokens == 0
    assert second.guidance == "Start chest compressions now. Push hard and fast."
    assert AuditEvent.objects.get(call=second, action="call.done").data == {"shared_from": first.pk}


def test_a_follower_generates_its_own_guidance_when_its_source_is_cancelled(burst, redis_conn):
    first, second, _ = burst
    call_cancel(call=first, actor="system:test")
    incident_guidance_settle(source_ids=[first.pk])
    second.refresh_from_db()
    assert second.guidance_source_id is None and second.status == CallStatus.QUEUED
    assert second.pk in [int(e["call_id"]) for e in stream_entries(redis_conn)]
    assert AuditEvent.objects.filter(call=second, action="call.guidance_unshared").exists()


def test_a_dispatcher_splits_a_call_out_it_generates_its_own_and_is_never_linked_again(burst, redis_conn, dispatcher):
    first, second, _ = burst
    call_incident_split(call=second, user=dispatcher)
    second.refresh_from_db()
    assert (second.incident_id, second.incident_split, second.guidance_source_id) == (None, True, None)
    assert second.pk in [int(e["call_id"]) for e in stream_entries(redis_conn)]
    assert AuditEvent.objects.get(call=second, action="call.link_split").actor == "user:dora"


def test_a_dispatcher_confirms_a_proposed_link(burst, dispatcher, make_user):
    _, second, _ = burst
    with pytest.raises(NotAllowed):
        call_incident_confirm(call=second, user=make_user("vic", "admin"))
    confirmed = call_incident_confirm(call=second, user=dispatcher)
    assert confirmed.incident_confirmed_by == dispatcher and confirmed.incident_confirmed_at is not None
