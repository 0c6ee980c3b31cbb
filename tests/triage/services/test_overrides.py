import json

import pytest

from tests.fixtures.predictors import ARREST_TRANSCRIPT
from tests.triage.factories import make_call
from triage.models import AuditEvent, CallStatus
from triage.services.assessments import call_triage_record
from triage.services.calls import call_transition
from triage.services.errors import Conflict, DomainError, NotAllowed
from triage.services.overrides import call_override_level
from triage.streams import control_channel

pytestmark = pytest.mark.django_db


@pytest.fixture
def triaged_call(triage_predictor):
    """A cardiac arrest call, triaged by the trained predictors: ESI 1."""

    def triaged_call():
        call = make_call(transcript=ARREST_TRANSCRIPT)
        [prediction] = triage_predictor.predict([call.transcript])
        call = call_triage_record(
            call=call, prediction=prediction, model_version=triage_predictor.version, latency_ms=1
        )
        assert call.level == 1
        return call

    return triaged_call


def test_a_dispatcher_override_sets_the_level_records_who_and_why(dispatcher, triaged_call):
    call = triaged_call()
    call_override_level(call=call, level=3, reason="he is breathing and talking now", user=dispatcher)
    call.refresh_from_db()
    assert call.level == 3
    assert (call.assessment.override_esi, call.assessment.overridden_by, call.assessment.predicted_esi) == (3, dispatcher, 1)
    event = AuditEvent.objects.get(call=call, action="call.level_overridden")
    assert event.actor == "user:dora" and (event.data["from_level"], event.data["to_level"]) == (1, 3)
    assert event.data["reason"]


def test_a_supervisor_may_override_too(supervisor, triaged_call):
    assert call_override_level(call=triaged_call(), level=2, reason="r", user=supervisor).level == 2


def test_a_user_without_the_dispatcher_role_may_not_override(make_user, triaged_call):
    with pytest.raises(NotAllowed):
        call_override_level(call=triaged_call(), level=2, reason="r", user=make_user("admin-only", "admin"))


@pytest.mark.parametrize(("level", "reason", "field"), [(0, "r", "esi"), (6, "r", "esi"), (True, "r", "esi"), (2, "  ", "reason")])
def test_an_override_needs_a_valid_level_and_a_reason(dispatcher, triaged_call, level, reason, field):
    call = triaged_call()
    with pytest.raises(DomainError) as error:
        call_override_level(call=call, level=level, reason=reason, user=dispatcher)
    assert field in error.value.fields
    call.refresh_from_db()
    assert call.level == 1 and call.assessment.override_esi is None


def test_an_untriaged_or_finished_call_cannot_be_overridden(dispatcher, triaged_call):
    with pytest.raises(Conflict):
        call_override_level(call=make_call(), level=1, reason="r", user=dispatcher)
    call = triaged_call()
    call_transition(call=call, to_status=CallStatus.CANCELLED, actor="system:test")
    with pytest.raises(Conflict):
        call_override_level(call=call, level=2, reason="r", user=dispatcher)


def test_the_override_reaches_the_control_channel_after_commit_with_the_new_levels_tier(
    dispatcher, tiers, triaged_call, redis_conn, django_capture_on_commit_callbacks
):
    call = triaged_call()
    pubsub = redis_conn.pubsub()
    pubsub.subscribe(control_channel())
    pubsub.get_message(timeout=1)
    with django_capture_on_commit_callbacks(execute=True):
        call_override_level(call=call, level=3, reason="breathing again", user=dispatcher)
    message = pubsub.get_message(timeout=2)
    pubsub.close()
    assert json.loads(message["data"]) == {"kind": "reprioritise", "call_id": call.pk, "level": 3, "tier": "Urgent"}
