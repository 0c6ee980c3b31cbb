"""The triage task in-process with the trained predictors: micro-batches under bursts, idempotent re-runs,
no double claims. ``recording_predictor`` is the real predictor recording the batch sizes it was asked for."""

import threading

import pytest
from django.db import connection

from tests.fixtures.predictors import ARREST_TRANSCRIPT, RecordingPredictor
from tests.fixtures.services import stream_entries
from tests.triage.factories import make_call
from triage.models import Call, CallStatus, SchedulerSettings
from triage.services.batching import call_triage_micro_batch
from triage.tasks import triage_call


@pytest.mark.django_db
def test_a_burst_of_waiting_calls_is_classified_in_one_predictor_call(
    recording_predictor, redis_conn, django_capture_on_commit_callbacks
):
    calls = [make_call(transcript=ARREST_TRANSCRIPT) for _ in range(10)]
    with django_capture_on_commit_callbacks(execute=True):
        result = triage_call.run(calls[3].pk)
    assert recording_predictor.batches == [10]
    assert sorted(result["triaged"]) == sorted(c.pk for c in calls)
    assert set(Call.objects.values_list("status", flat=True)) == {CallStatus.QUEUED}
    assert set(Call.objects.values_list("level", flat=True)) == {1}
    assert set(Call.objects.values_list("assessment__model_version", flat=True)) == {recording_predictor.version}
    assert len(stream_entries(redis_conn)) == 10


@pytest.mark.django_db
def test_a_burst_larger_than_micro_batch_max_is_drained_in_batches_of_at_most_max(recording_predictor, redis_conn):
    SchedulerSettings.objects.filter(pk=SchedulerSettings.load().pk).update(micro_batch_max=4)
    calls = [make_call() for _ in range(6)]
    result = triage_call.run(calls[-1].pk)
    assert recording_predictor.batches == [4, 2]
    assert result["triaged"][0] == calls[-1].pk  # its own call is always in the first batch
    assert sorted(result["triaged"]) == sorted(c.pk for c in calls)
    assert not Call.objects.filter(status=CallStatus.RECEIVED).exists()


@pytest.mark.django_db
def test_a_task_for_an_already_triaged_call_does_not_classify_again(recording_predictor, redis_conn):
    call = make_call()
    triage_call.run(call.pk)
    again = triage_call.run(call.pk)
    assert recording_predictor.batches == [1]
    assert again == {"triaged": [], "skipped": "already triaged"}
    assert Call.objects.get(pk=call.pk).status == CallStatus.QUEUED  # the re-run finished the enqueue step
    assert triage_call.run(call.pk)["skipped"] == "status queued"


@pytest.mark.django_db
def test_a_task_for_a_missing_call_does_nothing(recording_predictor):
    assert triage_call.run(10**9)["skipped"] == "status None"
    assert recording_predictor.batches == []


def test_the_task_is_late_acked_and_retried_with_backoff():
    assert triage_call.acks_late and triage_call.reject_on_worker_lost
    assert triage_call.retry_backoff and triage_call.max_retries >= 3 and triage_call.autoretry_for


class _SlowPredictor(RecordingPredictor):
    """The real predictor, held back until the test releases it: a first worker still classifying."""

    def __init__(self, predictor, started, release):
        super().__init__(predictor)
        self.started, self.release = started, release

    def predict(self, transcripts):
        self.started.set()
        self.release.wait(timeout=10)
        return super().predict(transcripts)


@pytest.mark.django_db(transaction=True)
def test_two_workers_never_claim_the_same_call(triage_predictor, redis_conn, monkeypatch):
    monkeypatch.setattr("triage.services.calls.send_triage_task", lambda call_id: True)
    calls = [make_call() for _ in range(3)]
    started, release = threading.Event(), threading.Event()
    slow = _SlowPredictor(triage_predictor, started, release)
    outcome = {}

    def first_worker():
        try:
            outcome["first"] = call_triage_micro_batch(call_id=calls[0].pk, predictor=slow)
        finally:
            connection.close()

    thread = threading.Thread(target=first_worker)
    thread.start()
    assert started.wait(timeout=10)
    second = RecordingPredictor(triage_predictor)
    assert call_triage_micro_batch(call_id=calls[2].pk, predictor=second).skipped == "claimed by another worker"
    release.set()
    thread.join(timeout=10)
    assert second.batches == [] and len(outcome["first"].triaged_ids) == 3


class _PoisonedPredictor(RecordingPredictor):
    """The real predictor, except that it rejects one input the way a classifier rejects a transcript it
    cannot take (the trained one takes any text; this is the only way to reach that path)."""

    def predict(self, transcripts):
        if any("POISON" in t for t in transcripts):
            self.batches.append(len(transcripts))
            raise ValueError("cannot embed this")
        return super().predict(transcripts)


@pytest.mark.django_db
def test_a_call_that_breaks_the_classifier_fails_alone_and_its_batch_is_triaged(triage_predictor, redis_conn):
    good = [make_call(transcript=ARREST_TRANSCRIPT) for _ in range(3)]
    poison = make_call(transcript="POISON")
    predictor = _PoisonedPredictor(triage_predictor)
    outcome = call_triage_micro_batch(call_id=good[0].pk, predictor=predictor)
    assert predictor.batches == [4, 1, 1, 1, 1]  # the batch, then one call at a time
    assert sorted(outcome.triaged_ids) == sorted(c.pk for c in good)
    poison.refresh_from_db()
    assert poison.status == CallStatus.FAILED and "classifier error" in poison.failure_reason
    assert set(Call.objects.filter(pk__in=[c.pk for c in good]).values_list("status", flat=True)) == {"triaged"}


MINOR_TRANSCRIPT = "I twisted my ankle yesterday, it's a bit swollen, can I get something for it"


@pytest.mark.django_db
def test_a_backlog_is_classified_likely_life_threatening_calls_first(recording_predictor, redis_conn):
    SchedulerSettings.objects.filter(pk=SchedulerSettings.load().pk).update(micro_batch_max=3)
    minor = [make_call(transcript=MINOR_TRANSCRIPT) for _ in range(5)]
    arrests = [make_call(transcript=ARREST_TRANSCRIPT) for _ in range(2)]
    result = triage_call.run(minor[0].pk)
    assert recording_predictor.batches == [3, 3, 1]
    first_batch = result["triaged"][:3]
    assert first_batch[0] == minor[0].pk  # the task's own call
    assert set(first_batch[1:]) == {a.pk for a in arrests}  # posted last, classified first


@pytest.mark.django_db
def test_no_call_is_deferred_by_the_pre_screen_past_its_bound(recording_predictor, redis_conn):
    from datetime import timedelta

    from django.utils import timezone

    from triage.services.batching import SCREEN_MAX_DEFER_S

    SchedulerSettings.objects.filter(pk=SchedulerSettings.load().pk).update(micro_batch_max=2)
    own = make_call(transcript=MINOR_TRANSCRIPT)
    overdue = make_call(transcript=MINOR_TRANSCRIPT)
    Call.objects.filter(pk=overdue.pk).update(created_at=timezone.now() - timedelta(seconds=SCREEN_MAX_DEFER_S + 1))
    arrests = [make_call(transcript=ARREST_TRANSCRIPT) for _ in range(2)]
    result = triage_call.run(own.pk)
    assert result["triaged"][:2] == [own.pk, overdue.pk]
    assert set(result["triaged"][2:]) == {a.pk for a in arrests}


@pytest.mark.django_db
def test_under_an_urgency_blind_policy_a_backlog_is_classified_in_arrival_order(recording_predictor, redis_conn):
    SchedulerSettings.objects.filter(pk=SchedulerSettings.load().pk).update(micro_batch_max=3, policy="fcfs")
    minor = [make_call(transcript=MINOR_TRANSCRIPT) for _ in range(5)]
    arrests = [make_call(transcript=ARREST_TRANSCRIPT) for _ in range(2)]
    result = triage_call.run(minor[0].pk)
    assert recording_predictor.batches == [3, 3, 1]
    assert result["triaged"] == [c.pk for c in minor + arrests]
