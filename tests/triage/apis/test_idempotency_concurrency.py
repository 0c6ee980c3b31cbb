"""Concurrent retries of one call, each on its own database connection: one row, one 201, the rest 200."""

import threading

import pytest
from django.db import connection
from rest_framework.test import APIClient

from tests.triage.factories import call_payload
from triage.models import AuditEvent, Call

THREADS = 8


def _post_concurrently(token, payload):
    barrier = threading.Barrier(THREADS)
    results = [None] * THREADS

    def worker(index):
        http = APIClient()
        http.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        try:
            barrier.wait(timeout=10)
            response = http.post("/api/v1/calls/", payload, format="json")
            results[index] = (response.status_code, response.json()["id"])
        finally:
            connection.close()  # this thread's own connection

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return results


@pytest.mark.django_db(transaction=True)
def test_concurrent_retries_store_one_call_and_answer_201_once(redis_conn, client_and_token, monkeypatch):
    monkeypatch.setattr("triage.services.calls.send_triage_task", lambda call_id: True)
    for attempt in range(3):  # a few rounds: the race must be won by the constraint every time
        results = _post_concurrently(client_and_token[1], call_payload(external_id=f"race-{attempt}"))
        statuses = sorted(status for status, _ in results)
        assert statuses == [200] * (THREADS - 1) + [201]
        assert len({call_id for _, call_id in results}) == 1
    assert Call.objects.count() == 3
    assert AuditEvent.objects.filter(action="call.created").count() == 3
