"""`manage.py loadtest` end to end with small models: the real web server, Celery worker and inference worker
(started by the command), one policy after the other on the same trace, summarised from the database."""

import json
import uuid
from io import StringIO

import pytest
from django.core.management import call_command

from tests.fixtures.predictors import predictor_env
from tests.fixtures.services import database_url_for_test_db
from tools.management.commands.loadtest import WARM_UP
from triage.models import Call, CallStatus

CALLS = 10


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_loadtest_replays_one_trace_per_policy_through_the_whole_stack_and_compares_with_fcfs(
    tiny_guidance_model, trained_predictors_dir, settings, monkeypatch, tmp_path
):
    suffix = uuid.uuid4().hex[:8]
    env = {
        "DATABASE_URL": database_url_for_test_db(), "DATABASE_CONN_MAX_AGE": "0", "REDIS_URL": settings.REDIS_URL,
        "INFERENCE_MODEL": str(tiny_guidance_model), "TRIAGE_MODELS_DIR": str(tmp_path / "no-models"),
        "TRIAGE_INFERENCE_STREAM": f"test:loadtest:{suffix}", "TRIAGE_CONTROL_CHANNEL": f"test:loadtest-control:{suffix}",
        "TRIAGE_INFERENCE_NICE": "0",  # on a busy CI machine a niced engine could miss the timeout
        **predictor_env(trained_predictors_dir),
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    out = StringIO()
    call_command("loadtest", calls=CALLS, pattern="burst", policy="semantic,fcfs", json=True, timeout=240, stdout=out)
    results = json.loads(out.getvalue())

    assert [r["policy"] for r in results] == ["semantic", "fcfs"]
    for r in results:
        assert r["calls"] == r["completed"] == CALLS
        assert sum(s["count"] for s in r["by_esi"].values()) == CALLS
        for s in r["by_esi"].values():
            if s["count"]:
                assert 0 < s["ttft_p50"] <= s["e2e_p50"] and s["triage_p50"] < s["ttft_p50"]
        assert set(r["preemptions"]) == {"swap", "recompute", "partial"}
        assert r["throughput_tokens_per_s"] > 0 and "throughput" in r["vs_fcfs"]
    traced = Call.objects.exclude(external_id__startswith=WARM_UP)  # and one warm-up call before each trace
    assert traced.filter(status=CallStatus.DONE).count() == 2 * CALLS  # one trace per policy, none lost


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_loadtest_sends_every_event_to_a_receiver_that_never_answers_and_every_call_still_completes(
    tiny_guidance_model, trained_predictors_dir, settings, monkeypatch, tmp_path
):
    """--webhooks black-hole: the deliveries time out on the webhook worker's threads while triage and guidance
    run (the comparison with none is BENCHMARKS.md's, "Webhooks that black-hole")."""
    from triage.models import WebhookDelivery

    suffix = uuid.uuid4().hex[:8]
    env = {
        "DATABASE_URL": database_url_for_test_db(), "DATABASE_CONN_MAX_AGE": "0", "REDIS_URL": settings.REDIS_URL,
        "INFERENCE_MODEL": str(tiny_guidance_model), "TRIAGE_MODELS_DIR": str(tmp_path / "no-models"),
        "TRIAGE_INFERENCE_STREAM": f"test:loadtest:{suffix}", "TRIAGE_CONTROL_CHANNEL": f"test:loadtest-control:{suffix}",
        "TRIAGE_INFERENCE_NICE": "0", "TRIAGE_WEBHOOK_TIMEOUT_S": "1",
        **predictor_env(trained_predictors_dir),
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    out = StringIO()
    call_command("loadtest", calls=6, pattern="burst", policy="semantic", webhooks="black-hole", json=True,
                 timeout=240, stdout=out)
    [result] = json.loads(out.getvalue())
    assert result["webhooks"] == "black-hole" and result["completed"] == result["calls"] == 6
    assert result["black_hole_connections"] > 0 and result["triage_p50"] > 0
    attempts = WebhookDelivery.objects.all()
    assert attempts.exists() and {a.outcome for a in attempts} <= {"retrying", "gave_up"}
    assert all("timed out" in a.error.lower() for a in attempts), {a.error for a in attempts}


def test_a_level_filtered_trace_keeps_exactly_the_calls_triage_puts_at_those_levels(
    triage_predictor, trained_predictors_dir, settings
):
    from tests.fixtures.predictors import REAL_PREDICTOR_LOADER
    from tools.load_traces import CORPUS, load_trace, only_levels

    settings.TRIAGE = {**settings.TRIAGE, "PREDICTORS_DIR": str(trained_predictors_dir),
                       "PREDICTOR_LOADER": REAL_PREDICTOR_LOADER}
    trace = load_trace(CORPUS, 60, "burst", 5.0, 7)
    kept = only_levels(trace, {1})
    assert 0 < len(kept) < len(trace)
    assert all(p.esi == 1 for p in triage_predictor.predict([record["transcript"] for _, record in kept]))
    assert [record["id"] for _, record in kept] == [r["id"] for _, r in trace if any(r is k for _, k in kept)]


def test_a_vllm_server_gets_the_step_budget_it_is_given_and_vllms_own_without_one():
    from inference.backends.vllm_server import server_argv

    argv = server_argv("models/m", 8100, max_num_batched_tokens=256)
    assert argv[argv.index("--max-num-batched-tokens") + 1] == "256"
    assert "--max-num-batched-tokens" not in server_argv("models/m", 8100)


def test_a_mass_casualty_trace_lands_its_burst_on_a_poisson_background_weighted_to_the_urgent_levels():
    from tools.load_traces import CORPUS, load_trace

    trace = load_trace(CORPUS, 400, "mass-casualty", 1.0, seed=3, duration_s=300.0, burst_at_s=60.0)
    offsets = [t for t, _ in trace]
    assert offsets == sorted(offsets)
    burst = [r for t, r in trace if 60.0 <= t <= 70.0]
    background = [r for t, r in trace if not 60.0 <= t <= 70.0]
    assert len(burst) >= 400 and 240 <= len(background) <= 360  # ~290 at 1 call/s outside the burst's 10 s

    def urgent(records: list[dict]) -> float:
        return sum(r["esi"] <= 2 for r in records) / len(records)

    assert urgent(burst) > 0.35 and urgent(background) < 0.25  # the mixes: 45 % and 17 % ESI 1-2


def test_a_dispatch_centre_trace_is_poisson_at_its_rate_mostly_low_acuity_and_of_written_calls():
    from collections import Counter

    from scheduler.workloads import DISPATCH_CENTRE_ESI_MIX
    from tools.load_traces import CORPUS, load_trace

    trace = load_trace(CORPUS, 2000, "dispatch", 0.5, seed=5)
    offsets = [t for t, _ in trace]
    assert offsets == sorted(offsets) and 3600 <= offsets[-1] <= 4400  # 2000 calls at 0.5/s: ~4000 s
    shares = Counter(r["esi"] for _, r in trace)
    for level, share in DISPATCH_CENTRE_ESI_MIX.items():
        assert abs(shares[level] / len(trace) - share) < 0.03, level
    assert all(r["id"].startswith("w") for _, r in trace)  # fixtures/calls/written/
