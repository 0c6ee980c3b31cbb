from datetime import timedelta

import pytest
from django.utils import timezone

from tests.triage.factories import make_call
from triage.models import Call
from triage.selectors.calls import call_get, call_list
from triage.services.calls import call_transition

pytestmark = pytest.mark.django_db


def test_a_client_sees_only_its_own_calls(make_api_client):
    a, _ = make_api_client()
    b, _ = make_api_client()
    mine, theirs = make_call(client=a), make_call(client=b)
    assert call_get(call_id=mine.pk, client=a) == mine
    assert call_get(call_id=theirs.pk, client=a) is None
    assert list(call_list(client=a)) == [mine]
    assert set(call_list()) == {mine, theirs}  # a dashboard user sees all


def test_call_list_filters_by_status_level_and_received_time():
    old = make_call()
    Call.objects.filter(pk=old.pk).update(received_at=timezone.now() - timedelta(hours=2), level=1)
    new = make_call()
    call_transition(call=new, to_status="cancelled", actor="system:test")
    assert list(call_list(statuses=["cancelled"])) == [new]
    assert list(call_list(levels=[1])) == [old]
    assert list(call_list(since=timezone.now() - timedelta(hours=1))) == [new]
    assert list(call_list(statuses=["received"], levels=[2])) == []


def test_call_list_is_newest_first():
    first, second = make_call(), make_call()
    assert list(call_list()) == [second, first]
