"""A real Celery worker process on the test database and Redis: POST → queued, assessed, in the stream."""

import pytest
from rest_framework.test import APIClient

from tests.fixtures.services import stream_entries, wait_until
from tests.triage.factories import call_payload
from triage.models import Call, CallStatus

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _queued(call_ids):
    return Call.objects.filter(pk__in=call_ids, status=CallStatus.QUEUED).count() == len(call_ids)


def test_a_posted_call_is_triaged_by_the_worker_and_appended_to_the_stream(
    celery_worker_process, redis_conn, client_and_token
):
    http = APIClient()
    http.credentials(HTTP_AUTHORIZATION=f"Bearer {client_and_token[1]}")
    transcripts = ["My husband is not breathing, his lips are blue", "I twisted my ankle, it's a sprain I think"]
    ids = [http.post("/api/v1/calls/", call_payload(transcript=t), format="json").json()["id"] for t in transcripts]
    wait_until(lambda: _queued(ids), timeout_s=90)
    for call in Call.objects.filter(pk__in=ids).select_related("assessment"):
        assert call.level in (1, 2, 3, 4, 5) and call.assessment.predicted_esi == call.level
        assert call.triaged_at <= call.queued_at and len(call.assessment.probabilities) == 5
    entries = {int(e["call_id"]): e for e in stream_entries(redis_conn)}
    assert set(entries) == set(ids)
    assert int(entries[ids[0]]["level"]) <= int(entries[ids[1]]["level"])  # not breathing is never less urgent
    detail = http.get(f"/api/v1/calls/{ids[0]}/").json()
    assert detail["status"] == "queued" and detail["assessment"]["model_version"]
