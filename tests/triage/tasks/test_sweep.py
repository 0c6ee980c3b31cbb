"""An accepted call is never lost: calls left behind by a broker outage or a failed stream append are re-sent."""

import time
from datetime import timedelta

import pytest
import redis
from django.utils import timezone
from kombu.exceptions import OperationalError
from prometheus_client import REGISTRY
from rest_framework.test import APIClient

from config.celery import app as celery_app
from tests.fixtures.services import stream_entries, wait_until
from tests.triage.factories import call_payload, make_call
from triage.models import Call, CallStatus, CallUpdate
from triage.services.assessments import call_triage_record
from triage.services.call_updates import call_update_append
from triage.streams import inference_stream
from triage.tasks import sweep_stuck_calls


def _broker_down(*args, **kwargs):
    raise OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")


def _sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def _age(call_ids, seconds=120):
    past = timezone.now() - timedelta(seconds=seconds)
    Call.objects.filter(pk__in=call_ids).update(created_at=past, triaged_at=past)


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_calls_accepted_while_the_broker_was_down_are_queued_after_the_sweep(
    celery_worker_process, redis_conn, client_and_token, monkeypatch
):
    http = APIClient()
    http.credentials(HTTP_AUTHORIZATION=f"Bearer {client_and_token[1]}")
    with monkeypatch.context() as outage:
        outage.setattr(celery_app, "send_task", _broker_down)  # Celery's publish, as when the broker is away
        responses = [http.post("/api/v1/calls/", call_payload(), format="json") for _ in range(3)]
    assert [r.status_code for r in responses] == [201, 201, 201]  # accepted, though the task never left
    ids = [r.json()["id"] for r in responses]
    assert set(Call.objects.filter(pk__in=ids).values_list("status", flat=True)) == {CallStatus.RECEIVED}

    assert sweep_stuck_calls()["received"] == 0  # too young: their own task may still come
    _age(ids)
    left_behind = _sample("triage_sweep_stuck_calls_total", status="received")
    assert sweep_stuck_calls()["resent"] == 3
    # what the alerts read (docs/observability/alerts.yml: TriageCallsLeftBehind, TriageBeatNotSweeping)
    assert _sample("triage_sweep_stuck_calls_total", status="received") == left_behind + 3
    assert time.time() - _sample("triage_sweep_last_run_timestamp_seconds") < 60
    wait_until(lambda: Call.objects.filter(pk__in=ids, status=CallStatus.QUEUED).count() == 3, timeout_s=90)
    assert {int(e["call_id"]) for e in stream_entries(redis_conn)} == set(ids)


@pytest.mark.django_db
def test_a_triaged_call_whose_stream_append_failed_is_appended_by_the_sweep(
    triage_predictor, redis_conn, monkeypatch, django_capture_on_commit_callbacks
):
    call = make_call()
    [prediction] = triage_predictor.predict([call.transcript])

    def stream_down(entries):
        raise redis.ConnectionError("stream unreachable")

    with monkeypatch.context() as outage:
        outage.setattr("triage.services.assessments.stream_append_many", stream_down)
        with django_capture_on_commit_callbacks(execute=True):
            call_triage_record(call=call, prediction=prediction, model_version=triage_predictor.version, latency_ms=1)
    assert Call.objects.get(pk=call.pk).status == CallStatus.TRIAGED
    _age([call.pk])
    assert sweep_stuck_calls()["queued"] == 1
    assert Call.objects.get(pk=call.pk).status == CallStatus.QUEUED
    assert [int(e["call_id"]) for e in stream_entries(redis_conn)] == [call.pk]


@pytest.mark.django_db
def test_the_sweep_leaves_queued_and_recent_calls_alone(redis_conn, monkeypatch):
    sent = []
    monkeypatch.setattr("triage.tasks.send_triage_task", lambda call_id: sent.append(call_id) or True)
    recent, old = make_call(), make_call()
    _age([old.pk])
    assert sweep_stuck_calls() == {"received": 1, "resent": 1, "triaged": 0, "queued": 0, "restreamed": 0,
                                   "unread_narrative": 0, "guidance_shared": 0, "escalated": 0}
    assert sent == [old.pk] and recent.pk not in sent


@pytest.mark.django_db
def test_a_call_whose_re_triage_task_was_lost_is_read_again_by_the_sweep(triage_predictor, redis_conn, monkeypatch):
    call = make_call(transcript="my neighbour is not well")
    [prediction] = triage_predictor.predict([call.transcript])
    call_triage_record(call=call, prediction=prediction, model_version=triage_predictor.version, latency_ms=1)
    monkeypatch.setattr("triage.services.call_updates.send_retriage_task", lambda call_id: False)  # broker away
    for update_id, when in (("u1", 120), ("u2", 1)):
        update, _ = call_update_append(call=call, update_id=update_id, received_at=timezone.now(),
                                       actor="system:test", narrative="she fell")
        CallUpdate.objects.filter(pk=update.pk).update(created_at=timezone.now() - timedelta(seconds=when))
    sent = []
    monkeypatch.setattr("triage.tasks.send_retriage_task", lambda call_id: sent.append(call_id) or True)
    assert sweep_stuck_calls()["unread_narrative"] == 0 and sent == []  # its last update is recent: its own task
    CallUpdate.objects.filter(call=call).update(created_at=timezone.now() - timedelta(seconds=120))
    assert sweep_stuck_calls()["unread_narrative"] == 1 and sent == [call.pk]


def _queued_calls(predictor, n, django_capture_on_commit_callbacks):
    calls = [make_call() for _ in range(n)]
    predictions = predictor.predict([c.transcript for c in calls])
    with django_capture_on_commit_callbacks(execute=True):
        for call, prediction in zip(calls, predictions, strict=True):
            call_triage_record(call=call, prediction=prediction, model_version=predictor.version, latency_ms=1)
    return calls


@pytest.mark.django_db
def test_calls_whose_stream_redis_lost_are_put_back_once_from_the_database(
    triage_predictor, redis_conn, django_capture_on_commit_callbacks
):
    """Redis restarted without persistence while calls waited for the worker: nothing in Redis remembers
    them, PostgreSQL does. The sweep appends one entry per call still in the stream's statuses, and only once."""
    queued, generating, done = _queued_calls(triage_predictor, 3, django_capture_on_commit_callbacks)
    Call.objects.filter(pk=generating.pk).update(status=CallStatus.DECODING)
    Call.objects.filter(pk=done.pk).update(status=CallStatus.DONE)
    assert sweep_stuck_calls()["restreamed"] == 0  # the stream is intact: nothing to do
    redis_conn.delete(inference_stream(), f"{inference_stream()}:complete")  # what a restart without persistence leaves

    assert sweep_stuck_calls()["restreamed"] == 2
    assert sorted(int(e["call_id"]) for e in stream_entries(redis_conn)) == sorted([queued.pk, generating.pk])
    assert sweep_stuck_calls()["restreamed"] == 0
    assert len(stream_entries(redis_conn)) == 2


@pytest.mark.django_db
def test_while_redis_is_away_the_sweep_fails_and_the_rebuild_is_left_for_the_next_one(
    triage_predictor, redis_conn, django_capture_on_commit_callbacks, monkeypatch
):
    [call] = _queued_calls(triage_predictor, 1, django_capture_on_commit_callbacks)
    redis_conn.delete(inference_stream(), f"{inference_stream()}:complete")

    def refused(entries, stream=None):
        raise redis.ConnectionError("Redis is loading the dataset in memory")

    with monkeypatch.context() as outage:
        outage.setattr("triage.services.recovery.stream_append_many", refused)
        with pytest.raises(redis.ConnectionError):
            sweep_stuck_calls.run()
    assert sweep_stuck_calls()["restreamed"] == 1
    assert [int(e["call_id"]) for e in stream_entries(redis_conn)] == [call.pk]
