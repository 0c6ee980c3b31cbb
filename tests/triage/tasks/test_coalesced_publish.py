"""Under a burst the web process publishes one triage task, not one per call, and still loses none: the task
that absorbed the others' publishes drains every waiting call. Counted on the real broker (Redis list)."""

import pytest

from config.celery import app as celery_app
from tests.triage.factories import make_call
from triage.models import Call, CallStatus
from triage.services.dispatch import TRIAGE_TASK_PENDING_KEY
from triage.tasks import triage_call

QUEUE = "triage"


@pytest.fixture
def broker(redis_conn):
    redis_conn.delete(QUEUE, TRIAGE_TASK_PENDING_KEY)
    yield redis_conn
    redis_conn.delete(QUEUE, TRIAGE_TASK_PENDING_KEY)


def _create_calls(n, capture):
    with capture(execute=True):
        return [make_call() for _ in range(n)]


@pytest.mark.django_db
def test_a_burst_publishes_one_task_until_a_task_starts(
    broker, recording_predictor, django_capture_on_commit_callbacks
):
    _create_calls(5, django_capture_on_commit_callbacks)
    assert broker.llen(QUEUE) == 1
    triage_call.run(0)  # a task starting (its own call id aside) frees the slot...
    _create_calls(2, django_capture_on_commit_callbacks)
    assert broker.llen(QUEUE) == 2  # ...so the next burst publishes again


@pytest.mark.django_db
def test_the_one_task_triages_every_call_whose_publish_it_absorbed(
    broker, recording_predictor, django_capture_on_commit_callbacks
):
    calls = _create_calls(6, django_capture_on_commit_callbacks)
    assert broker.llen(QUEUE) == 1
    with django_capture_on_commit_callbacks(execute=True):
        result = triage_call.run(calls[0].pk)
    assert sorted(result["triaged"]) == sorted(c.pk for c in calls)
    assert set(Call.objects.values_list("status", flat=True)) == {CallStatus.QUEUED}


@pytest.mark.django_db
def test_a_failed_publish_frees_the_slot_for_the_next_call(broker, django_capture_on_commit_callbacks, monkeypatch):
    from kombu.exceptions import OperationalError

    def broker_down(*args, **kwargs):
        raise OperationalError("connection refused")

    with monkeypatch.context() as outage:
        outage.setattr(celery_app, "send_task", broker_down)  # Celery's publish, as when the broker is away
        _create_calls(1, django_capture_on_commit_callbacks)
    assert not broker.exists(TRIAGE_TASK_PENDING_KEY)
    _create_calls(1, django_capture_on_commit_callbacks)
    assert broker.llen(QUEUE) == 1
