import pytest

from inference.guidance.plan import normalise_transcript
from tests.fixtures.predictors import ARREST_TRANSCRIPT
from tests.fixtures.services import stream_entries
from tests.triage.factories import make_call
from triage.models import AuditEvent, Call, CallStatus
from triage.selectors.calls import calls_generation_input
from triage.services.assessments import call_triage_record, calls_enqueue

pytestmark = pytest.mark.django_db


@pytest.fixture
def record(triage_predictor):
    """Classify the call's transcript with the trained predictors and record the verdict."""

    def record(call):
        [prediction] = triage_predictor.predict([call.transcript])
        call_triage_record(call=call, prediction=prediction, model_version=triage_predictor.version, latency_ms=3.0)
        return prediction

    return record


def test_triage_record_stores_the_assessment_level_and_tier(
    tiers, record, triage_predictor, redis_conn, django_capture_on_commit_callbacks
):
    call = make_call(transcript=ARREST_TRANSCRIPT)
    with django_capture_on_commit_callbacks(execute=False):
        prediction = record(call)
    call.refresh_from_db()
    assert (call.status, call.level, call.tier.name) == ("triaged", 1, "Immediate")
    assert call.assessment.predicted_esi == 1 and call.assessment.override_esi is None
    assert call.assessment.probabilities == pytest.approx(list(prediction.probabilities), abs=1e-6)  # stored rounded
    assert sum(call.assessment.probabilities) == pytest.approx(1.0, abs=1e-5)
    assert call.assessment.model_version == triage_predictor.version


def test_after_commit_the_call_is_queued_with_one_stream_entry(
    tiers, record, redis_conn, django_capture_on_commit_callbacks
):
    transcript = "My wife has crushing chest pain going down her left arm and she's grey and sweaty"
    call = make_call(transcript=transcript, caller_relation="relative")
    with django_capture_on_commit_callbacks(execute=True):
        prediction = record(call)
    call.refresh_from_db()
    assert call.status == CallStatus.QUEUED and call.queued_at is not None
    [entry] = stream_entries(redis_conn)
    assert entry["call_id"] == str(call.pk) and entry["level"] == str(prediction.esi) == str(call.level)
    assert int(entry["predicted_output_tokens"]) == prediction.predicted_output_tokens >= 1
    assert float(entry["accepted_at"]) == call.created_at.timestamp() <= float(entry["enqueued_at"])
    assert set(entry) == {"call_id", "level", "predicted_output_tokens", "enqueued_at", "accepted_at"}
    # What to generate comes from the database, as the worker reads it.
    [generation] = calls_generation_input(call_ids=[call.pk]).values()
    assert generation.tier == tiers[prediction.esi - 1].name
    assert normalise_transcript(transcript) in generation.prompt  # the call, in the words the model was trained on
    protocol = call.assessment.protocol
    assert (f"Protocol: {protocol} v" in generation.prompt
            or f"Protocol: unclear ({call.assessment.protocol_family})" in generation.prompt)
    assert "Instructions: " in generation.prompt
    actions = list(AuditEvent.objects.filter(call=call).order_by("id").values_list("action", flat=True))
    assert actions == ["call.created", "call.triaged", "call.queued"]


def test_when_redis_refuses_the_entry_the_call_stays_triaged(tiers, record, redis_conn, monkeypatch):
    import redis

    call = make_call()
    record(call)  # in a TestCase transaction: on-commit hooks do not run

    def refuse(entries):
        raise redis.ConnectionError("down")

    monkeypatch.setattr("triage.services.assessments.stream_append_many", refuse)
    with pytest.raises(redis.ConnectionError):
        calls_enqueue(call_ids=[call.pk])
    call.refresh_from_db()
    assert call.status == CallStatus.TRIAGED
    assert not AuditEvent.objects.filter(call=call, action="call.queued").exists()


def test_enqueue_skips_calls_that_are_not_triaged(redis_conn):
    call = make_call()
    assert calls_enqueue(call_ids=[call.pk]) == []
    assert stream_entries(redis_conn) == []


def test_a_call_without_a_matching_tier_is_queued_without_tier(
    record, redis_conn, django_capture_on_commit_callbacks
):
    call = make_call(transcript="I twisted my ankle yesterday, it's a bit swollen but I can walk on it")
    with django_capture_on_commit_callbacks(execute=True):
        record(call)
    assert Call.objects.get(pk=call.pk).tier is None
    assert [int(e["call_id"]) for e in stream_entries(redis_conn)] == [call.pk]
    assert calls_generation_input(call_ids=[call.pk])[call.pk].tier == ""


def test_the_worker_learns_which_call_system_sent_a_call_for_fair_share(record):
    from triage.services.clients import api_client_create

    county = api_client_create(name="county-cad").client
    sent, own = make_call(client=county), make_call()
    record(sent)
    record(own)
    generation = calls_generation_input(call_ids=[sent.pk, own.pk])
    assert generation[sent.pk].client == "county-cad" and generation[own.pk].client == ""
