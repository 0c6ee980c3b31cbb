"""The probes compose and a load balancer use: liveness touches nothing, readiness names what is down."""

import pytest
from django.db import DEFAULT_DB_ALIAS, connections
from django.test import Client

from triage.streams import get_redis


@pytest.fixture
def probe(settings):
    settings.ALLOWED_HOSTS = ["triage.example.org"]  # a probe's Host header is whatever the prober sends
    settings.SECURE_SSL_REDIRECT = True
    return Client()


@pytest.mark.django_db
def test_liveness_and_readiness_answer_over_plain_http_under_any_host(probe):
    assert probe.get("/healthz", HTTP_HOST="10.0.0.7:8000").json() == {"alive": True}
    ready = probe.get("/readyz/", HTTP_HOST="localhost")
    assert ready.status_code == 200 and ready.json()["ready"] is True and ready.json()["problems"] == []


@pytest.mark.django_db
def test_readiness_turns_unready_when_redis_is_down(probe, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    response = probe.get("/readyz")
    assert response.status_code == 503 and response.json()["problems"] == ["redis: ConnectionError"]
    assert probe.get("/healthz").status_code == 200  # liveness does not depend on Redis


@pytest.mark.django_db(transaction=True)
def test_readiness_turns_unready_when_the_database_is_down(probe):
    connection = connections[DEFAULT_DB_ALIAS]
    port = connection.settings_dict["PORT"]
    connection.close()
    connection.settings_dict["PORT"] = "1"  # the server is gone: every new connection is refused
    try:
        response = probe.get("/readyz")
    finally:
        connection.close()
        connection.settings_dict["PORT"] = port
    assert response.status_code == 503 and response.json()["problems"] == ["database: OperationalError"]
    assert get_redis().ping()


def test_compose_restarts_every_long_running_service_and_probes_the_web_on_readyz():
    from pathlib import Path

    import yaml

    compose = yaml.safe_load((Path(__file__).resolve().parents[2] / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {name for name, s in services.items() if s.get("restart") != "unless-stopped"} == {"setup"}
    for name in ("web", "intake"):
        assert services[name]["healthcheck"]["test"][-1].endswith("/readyz"), name
