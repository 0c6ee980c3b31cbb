import dataclasses
import json

import pytest

from tests.fixtures.predictors import ARREST_TRANSCRIPT
from tests.triage.factories import make_call
from triage.models import AuditEvent, CallStatus
from triage.services.assessments import call_triage_record
from triage.services.calls import call_transition
from triage.services.errors import Conflict, DomainError, NotAllowed
from triage.services.overrides import call_confirm_level, call_override_level
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


@pytest.fixture
def uncertain_call(triage_predictor):
    """A call whose verdict is ESI 3, uncertain against ESI 2 (the verdict as the judgement would name it: the
    judgement's own rule is tested in tests/predictors/test_rules.py)."""

    def uncertain_call():
        call = make_call(transcript="my dad has chest pain, it comes and goes, he is 38")
        [prediction] = triage_predictor.predict([call.transcript])
        verdict = dataclasses.replace(prediction, esi=3, uncertain=True, alternative_esi=2)
        return call_triage_record(call=call, prediction=verdict, model_version=triage_predictor.version, latency_ms=1)

    return uncertain_call


def test_an_uncertain_call_is_held_at_the_more_urgent_level_with_the_verdict_kept(tiers, uncertain_call):
    call = uncertain_call()
    call.refresh_from_db()
    assert (call.level, call.tier.name) == (2, "Emergent")
    assert (call.assessment.predicted_esi, call.assessment.alternative_esi) == (3, 2)
    assert call.assessment.awaiting_confirmation
    event = AuditEvent.objects.get(call=call, action="call.triaged")
    assert (event.data["esi"], event.data["alternative_esi"], event.data["scheduled_level"]) == (3, 2, 2)


def test_confirming_the_verdict_releases_the_hold_and_reprioritises_the_running_scheduler(
    dispatcher, tiers, uncertain_call, redis_conn, django_capture_on_commit_callbacks
):
    call = uncertain_call()
    pubsub = redis_conn.pubsub()
    pubsub.subscribe(control_channel())
    pubsub.get_message(timeout=1)
    with django_capture_on_commit_callbacks(execute=True):
        call_confirm_level(call=call, level=3, user=dispatcher)
    message = pubsub.get_message(timeout=2)
    pubsub.close()
    assert json.loads(message["data"]) == {"kind": "reprioritise", "call_id": call.pk, "level": 3, "tier": "Urgent"}
    call.refresh_from_db()
    assert call.level == 3 and not call.assessment.awaiting_confirmation
    assert (call.assessment.level_confirmed_by, call.assessment.override_esi) == (dispatcher, None)
    event = AuditEvent.objects.get(call=call, action="call.level_confirmed")
    assert (event.data["from_level"], event.data["to_level"], event.actor) == (2, 3, "user:dora")
    with pytest.raises(Conflict):  # confirmed once: nothing left to confirm
        call_confirm_level(call=call, level=2, user=dispatcher)


def test_confirming_the_held_level_keeps_it_and_sends_nothing_to_the_scheduler(
    dispatcher, tiers, uncertain_call, django_capture_on_commit_callbacks
):
    call = uncertain_call()
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        call_confirm_level(call=call, level=2, user=dispatcher)
    call.refresh_from_db()
    assert call.level == 2 and call.assessment.level_confirmed_at is not None
    assert len(callbacks) == 1  # the board's refresh only: no reprioritise message


def test_only_the_two_named_levels_may_be_confirmed_and_only_of_an_uncertain_call(
    dispatcher, make_user, triaged_call, uncertain_call
):
    call = uncertain_call()
    with pytest.raises(DomainError) as error:
        call_confirm_level(call=call, level=1, user=dispatcher)
    assert "esi" in error.value.fields
    with pytest.raises(NotAllowed):
        call_confirm_level(call=call, level=3, user=make_user("admin-only", "admin"))
    with pytest.raises(Conflict):  # a certain verdict (the cardiac arrest) has nothing to confirm
        call_confirm_level(call=triaged_call(), level=1, user=dispatcher)
    call_override_level(call=call, level=4, reason="minor after all", user=dispatcher)
    with pytest.raises(Conflict):  # an override settles the level too
        call_confirm_level(call=call, level=3, user=dispatcher)
