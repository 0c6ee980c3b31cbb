"""Prometheus metrics of web/intake and of the Celery triage worker, scraped as Prometheus would (the inference
worker's: tests/engine/test_worker.py)."""

import os
import socket
from collections import Counter
from urllib.error import URLError
from urllib.request import urlopen

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.fixtures.predictors import predictor_env
from tests.fixtures.services import database_url_for_test_db, start_worker, stop_worker, wait_until
from tests.triage.factories import call_payload
from triage.models import Call, CallStatus


def _samples(text: str) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


@pytest.fixture
def metrics_token(settings):
    settings.TRIAGE = {**settings.TRIAGE, "METRICS_TOKEN": "scrape-me"}
    return "scrape-me"


@pytest.mark.django_db
def test_web_metrics_count_requests_and_accepted_calls_for_the_scraper_only(
    api, redis_conn, client, metrics_token, django_capture_on_commit_callbacks
):
    def scrape() -> dict:
        response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {metrics_token}")
        assert response.status_code == 200
        return _samples(response.content.decode())

    before = scrape()
    with django_capture_on_commit_callbacks(execute=True):  # a call counts once it is stored
        assert api.post("/api/v1/calls/", call_payload(), format="json").status_code == 201
    after = scrape()
    accepted = ("triage_calls_accepted_total", ())
    assert after[accepted] == before.get(accepted, 0) + 1
    created = ("triage_web_requests_total", (("method", "POST"), ("status", "2xx")))
    assert after[created] == before.get(created, 0) + 1
    assert client.get("/metrics").status_code == 404  # no token: the path does not exist
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer guess").status_code == 404


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_one_port_of_the_celery_worker_sums_its_pool_processes_triage_counts_by_esi(
        redis_conn, trained_predictors_dir, tmp_path, settings):
    """A worker of its own on a queue of its own (the session's Celery worker must not take the tasks), two pool
    processes: every call they triage is counted on the one port the main process serves (it triages nothing
    itself: prometheus_client's multiprocess mode sums the pool processes' files); the directory is emptied at
    the worker's start."""
    from django.utils import timezone

    from config.celery import app as celery_app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    queue = f"metrics-{port}"
    directory = tmp_path / "prometheus-celery"
    directory.mkdir()
    (directory / "counter_99999.db").write_bytes(b"left by a dead worker")
    env = {**os.environ, "DATABASE_URL": database_url_for_test_db(), "REDIS_URL": settings.REDIS_URL,
           "CELERY_BROKER_URL": settings.CELERY_BROKER_URL, "TRIAGE_CELERY_METRICS_PORT": str(port),
           "PROMETHEUS_MULTIPROC_DIR": str(directory), **predictor_env(trained_predictors_dir)}
    worker = start_worker(env, tmp_path / "worker.log", "--pool", "prefork", "--concurrency", "2", "-Q", queue,
                          "--prefetch-multiplier", "1")
    try:
        # Stored without the intake's task, so only this worker's tasks triage them; one task per call.
        calls = [Call.objects.create(external_id=f"metrics-{i}", received_at=timezone.now(),
                                     transcript=call_payload()["transcript"]) for i in range(6)]
        for call in calls:
            celery_app.send_task("triage.tasks.triage_call", args=(call.pk,), queue=queue)
        wait_until(lambda: not Call.objects.filter(pk__in=[c.pk for c in calls], status=CallStatus.RECEIVED).exists(),
                   timeout_s=90)
        levels = Counter(Call.objects.filter(pk__in=[c.pk for c in calls]).values_list("level", flat=True))

        def scrape() -> dict | None:
            try:
                with urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
                    return _samples(response.read().decode())
            except (URLError, OSError):
                return None

        def counted(samples: dict | None) -> dict[int, float] | None:
            if not samples:
                return None
            by_level = {level: samples.get(("triage_calls_triaged_total", (("esi", str(level)),)), 0)
                        for level in levels}
            return by_level if sum(by_level.values()) == len(calls) else None

        by_level = wait_until(lambda: counted(scrape()), timeout_s=30)  # counted on commit
        assert by_level == dict(levels)
        samples = scrape()
        assert sum(samples[("triage_triage_seconds_count", (("esi", str(level)),))] for level in levels) == len(calls)
        assert not (directory / "counter_99999.db").exists()
    finally:
        stop_worker(worker)


def test_a_celery_metrics_port_without_a_multiprocess_directory_is_refused_at_start(monkeypatch):
    from django.core.exceptions import ImproperlyConfigured

    from config.metrics import serve_celery_metrics

    monkeypatch.setenv("TRIAGE_CELERY_METRICS_PORT", "9200")
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    with pytest.raises(ImproperlyConfigured, match="PROMETHEUS_MULTIPROC_DIR"):
        serve_celery_metrics()
