"""Who works a call: a dispatcher claims it (not from another dispatcher), a supervisor assigns or takes it back,
the holder releases it; each an audit row."""

import pytest

from tests.triage.factories import make_call
from triage.models import AuditEvent
from triage.services.assignments import call_assign, call_claim, dispatchers
from triage.services.errors import Conflict, DomainError, NotAllowed

pytestmark = pytest.mark.django_db


def test_a_dispatcher_claims_an_unclaimed_call_and_the_claim_is_audited(dispatcher):
    call = call_claim(call=make_call(), user=dispatcher)
    assert call.assigned_to == dispatcher and call.assigned_at is not None
    audit = AuditEvent.objects.get(call=call, action="call.assigned")
    assert (audit.actor, audit.data) == ("user:dora", {"from": None, "to": "dora"})
    assert call_claim(call=call, user=dispatcher).assigned_to == dispatcher  # again: nothing changes
    assert AuditEvent.objects.filter(call=call, action="call.assigned").count() == 1


def test_a_call_another_dispatcher_works_cannot_be_claimed_but_a_supervisor_reassigns_it(dispatcher, supervisor, make_user):
    other = make_user("olga", "dispatcher")
    call = call_claim(call=make_call(), user=dispatcher)
    with pytest.raises(Conflict, match="being worked by dora"):
        call_claim(call=call, user=other)
    with pytest.raises(NotAllowed):
        call_assign(call=call, to=other, by=dispatcher)
    assert call_assign(call=call, to=other, by=supervisor).assigned_to == other
    assert AuditEvent.objects.filter(call=call, action="call.assigned").latest("id").data == {"from": "dora", "to": "olga"}


def test_the_holder_releases_a_call_and_only_dispatchers_are_assigned(dispatcher, supervisor, make_user):
    call = call_claim(call=make_call(), user=dispatcher)
    assert call_assign(call=call, to=None, by=dispatcher).assigned_to is None
    viewer = make_user("vic", "admin")
    with pytest.raises(DomainError) as error:
        call_assign(call=call, to=viewer, by=supervisor)
    assert "assigned_to" in error.value.fields
    assert {user.username for user in dispatchers()} == {"dora", "sam"}
