"""`manage.py faultdrill` in small: real web, Celery, beat and inference worker processes, a Redis of the drill's
own, the tiny models. Each fault is injected mid-burst; every accepted call must reach `done` exactly once with
no manual step. The full drill (300 calls, every fault) is in BENCHMARKS.md."""

import pytest
from django.core.management import call_command

from tests.fixtures.predictors import predictor_env
from tests.fixtures.services import database_url_for_test_db
from tools.faultdrill import FAULTS, DrillOptions, run_drill

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

# The faults that once lost calls or stopped inference: Redis restarted empty (with the worker running and
# stopped), a malformed stream entry; and the inference worker killed.
DRILLED_IN_CI = ("redis-restart-worker-stopped", "redis-restart", "malformed-entry", "inference")


@pytest.fixture
def drill_env(monkeypatch, trained_predictors_dir, tiny_guidance_model):
    call_command("loaddata", "fixtures/default_tiers.json", verbosity=0)
    monkeypatch.setenv("DATABASE_URL", database_url_for_test_db())
    for name, value in predictor_env(trained_predictors_dir).items():
        monkeypatch.setenv(name, value)
    return tiny_guidance_model


@pytest.mark.parametrize("fault", DRILLED_IN_CI)
def test_a_fault_mid_burst_loses_and_duplicates_no_call(drill_env, fault, tmp_path):
    options = DrillOptions(calls=12, max_new_tokens=16, model=str(drill_env), timeout_s=150, log_dir=tmp_path)
    result = run_drill(fault, options, log=lambda line: None)
    assert (result.accepted, result.done, result.lost, result.duplicated) == (12, 12, 0, 0), result


def test_every_fault_the_issue_names_can_be_drilled():
    assert set(FAULTS) == {"celery-main", "celery-child", "beat", "inference", "redis-restart",
                           "redis-restart-worker-stopped", "postgres-restart", "malformed-entry"}


def test_an_unknown_fault_is_refused_with_the_list():
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="unknown fault"):
        call_command("faultdrill", fault="power-cut")
