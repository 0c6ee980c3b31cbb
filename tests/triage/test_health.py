"""The probes compose and a load balancer use: liveness touches nothing, readiness names what is down."""

from pathlib import Path

import pytest
from django.db import DEFAULT_DB_ALIAS, connections
from django.test import Client

from triage.redis_clients import redis_bytes_client


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
    assert redis_bytes_client().ping()


def _compose() -> dict:
    import yaml

    return yaml.safe_load((Path(__file__).resolve().parents[2] / "docker-compose.yml").read_text())


def test_compose_restarts_every_long_running_service_and_probes_the_web_on_readyz():
    services = _compose()["services"]
    assert {name for name, s in services.items() if s.get("restart") != "unless-stopped"} == {"setup"}
    for name in ("web", "intake"):
        assert services[name]["healthcheck"]["test"][-1].endswith("/readyz"), name


def test_compose_runs_the_intake_on_its_restricted_urls_and_the_web_on_the_full_site():
    services = _compose()["services"]
    assert services["intake"]["environment"]["DJANGO_SETTINGS_MODULE"] == "config.settings_intake"
    assert "DJANGO_SETTINGS_MODULE" not in services["web"]["environment"]  # config.settings: the whole site


def test_compose_publishes_only_the_tls_proxy_and_points_it_at_daphne_and_the_intake():
    """The proxy's routes themselves are exercised live by `demo --production-like`, which runs the same
    Caddyfile (tests/triage/test_demo_production_like.py)."""
    services = _compose()["services"]
    assert {name for name, service in services.items() if service.get("ports")} == {"proxy"}
    proxy = services["proxy"]
    assert "./proxy:/etc/caddy:ro" in proxy["volumes"] and "/etc/caddy/Caddyfile" in proxy["command"]
    assert proxy["environment"]["TRIAGE_WEB_UPSTREAM"] == "web:8000"
    assert services["web"]["command"][-3:] == ["-p", "8000", "config.asgi:application"]
    assert proxy["environment"]["TRIAGE_INTAKE_UPSTREAM"] == "intake:8080"
    assert "0.0.0.0:8080" in services["intake"]["command"]
    assert set(proxy["depends_on"]) == {"web", "intake"}


def test_compose_starts_every_celery_process_with_the_projects_celery_app():
    """`celery -A NAME` as Celery resolves it (after the house split `-A triage` found no app: the workers and
    beat of compose would not have started)."""
    from celery.app.utils import find_app

    from config.celery import app

    commands = {name: s["command"] for name, s in _compose()["services"].items() if "celery" in s.get("command", [])}
    assert set(commands) == {"worker", "webhooks", "beat"}
    for name, command in commands.items():
        assert find_app(command[command.index("-A") + 1]) is app, name


def test_compose_is_well_formed_as_compose_reads_it():
    """What `docker compose config` would refuse, checked without a Docker engine: every service has an image or
    a build, its dependencies exist (and wait on health or completion), every long-running service has a
    healthcheck and resource limits, the GPU is reserved for inference, and every variable the app reads from
    the environment is one docs/configuration.md documents."""
    import re

    compose = _compose()
    services = compose["services"]
    documented = set(re.findall(r"^\| `([A-Z0-9_]+)`", (Path(__file__).resolve().parents[2] / "docs" /
                                                         "configuration.md").read_text(), re.M))
    allowed_keys = {"image", "build", "environment", "volumes", "depends_on", "command", "ports", "restart",
                    "healthcheck", "deploy", "profiles"}
    root = Path(__file__).resolve().parents[2]
    for name, service in services.items():
        assert set(service) <= allowed_keys, (name, set(service) - allowed_keys)
        assert "image" in service or "build" in service, name
        for dependency, condition in (service.get("depends_on") or {}).items():
            assert dependency in services, (name, dependency)
            assert condition["condition"] in ("service_healthy", "service_completed_successfully"), name
        for volume in service.get("volumes") or []:
            source = volume.split(":")[0]
            if source.startswith("./"):  # a bind mount: a folder of this repository, read-only
                assert (root / source).is_dir() and volume.endswith(":ro"), (name, volume)
            else:
                assert source in compose["volumes"], (name, volume)
        if name in ("postgres", "redis", "setup"):
            continue
        assert service["healthcheck"]["test"], name
        assert service["deploy"]["resources"]["limits"]["memory"], name
        unknown = {k for k in service.get("environment") or {} if k not in documented
                   and not k.startswith("POSTGRES_")}  # the postgres image's own
        assert unknown == set(), (name, unknown)
    [gpu] = services["inference"]["deploy"]["resources"]["reservations"]["devices"]
    assert gpu["capabilities"] == ["gpu"]


def test_compose_pins_each_vllm_replica_to_its_own_gpu_and_runs_the_vllm_worker_without_one():
    """Compose gives every service reserving a GPU `count` the first card; only `device_ids` pins one. The
    replicas run the image Dockerfile.vllm builds (the plug-in installed, not mounted), on the async class
    (tests/vllm checks that it is an AsyncScheduler), and the worker that routes to them reserves no GPU."""
    services = _compose()["services"]
    replicas = {name: s for name, s in services.items() if name.startswith("vllm-")}
    assert len(replicas) >= 2
    gpus = []
    for name, replica in replicas.items():
        assert replica["profiles"] == ["vllm"], name
        assert replica["build"]["dockerfile"] == "Dockerfile.vllm", name
        assert not any(v.startswith("./") for v in replica.get("volumes") or []), name  # nothing of ours mounted
        [device] = replica["deploy"]["resources"]["reservations"]["devices"]
        assert "count" not in device and len(device["device_ids"]) == 1, name
        gpus.append(device["device_ids"][0])
        command = replica["command"]
        assert command[command.index("--scheduler-cls") + 1] == (
            "inference.backends.vllm_scheduler.SemanticAsyncVllmScheduler"), name
        assert command[command.index("--scheduling-policy") + 1] == "priority", name
    assert len(set(gpus)) == len(gpus), gpus  # each replica its own card
    worker = services["inference-vllm"]
    assert worker["profiles"] == ["vllm"] and worker["environment"]["INFERENCE_BACKEND"] == "vllm"
    assert "reservations" not in worker["deploy"]["resources"]
    assert set(worker["environment"]["VLLM_URLS"].split(":-")[1].rstrip("}").split(",")) == {
        f"http://{name}:8000" for name in replicas}
    assert services["inference"]["profiles"] == ["engine"]
    assert services["inference"]["environment"]["INFERENCE_BACKEND"] == "hf"
    dockerfile = (Path(__file__).resolve().parents[2] / "Dockerfile.vllm").read_text()
    assert "FROM vllm/vllm-openai:v0.32.0" in dockerfile  # the version tests/vllm/test_internals.py pins


@pytest.mark.django_db
def test_beat_is_alive_while_the_sweep_it_schedules_has_run_recently(probe, settings):
    """Beat's healthcheck (`manage.py sweep_alive`) and /readyz read the key each finished sweep writes."""
    from django.core.management import CommandError, call_command

    from triage.redis_clients import SWEEP_LAST_AT_KEY, redis_text_client
    from triage.tasks import sweep_stuck_calls

    redis_text_client().delete(SWEEP_LAST_AT_KEY)
    with pytest.raises(CommandError, match="last ran never"):
        call_command("sweep_alive")
    assert probe.get("/readyz").json()["sweep"] == {"state": "unknown", "last_age_s": None}
    sweep_stuck_calls.apply()
    call_command("sweep_alive")  # exits 0
    assert probe.get("/readyz").json()["sweep"]["state"] == "ok"
    redis_text_client().set(SWEEP_LAST_AT_KEY, "0")  # the last sweep long ago: beat has stopped
    with pytest.raises(CommandError, match="limit 60 s"):
        call_command("sweep_alive")
    assert probe.get("/readyz").json()["sweep"]["state"] == "stale" and probe.get("/readyz").status_code == 200


def test_webhook_deliveries_have_a_queue_and_workers_of_their_own_and_every_task_a_time_limit(settings):
    """A receiver that black-holes connections holds webhook threads, never a call's classification (issue 32)."""
    from config.celery import app
    from triage import tasks

    route = app.amqp.router.route
    assert route({}, "triage.tasks.deliver_webhook")["queue"].name == "triage.webhooks"
    assert route({}, "triage.tasks.triage_call")["queue"].name == route({}, "triage.tasks.sweep_stuck_calls")[
        "queue"].name == "triage"
    services = _compose()["services"]
    assert services["worker"]["command"][services["worker"]["command"].index("-Q") + 1] == "triage"
    assert services["webhooks"]["command"][services["webhooks"]["command"].index("-Q") + 1] == "triage.webhooks"
    for task in (tasks.triage_call, tasks.sweep_stuck_calls, tasks.deliver_webhook):
        assert task.time_limit and task.soft_time_limit and task.soft_time_limit < task.time_limit, task.name
    # a retry's countdown never outlasts the broker's visibility timeout (it would be delivered twice)
    assert settings.CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"] > settings.TRIAGE["WEBHOOK_BACKOFF_MAX_S"]
