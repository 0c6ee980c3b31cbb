"""The inference worker against real Redis and PostgreSQL with the tiny model: stream in, results stored,
tokens streamed, entries acknowledged only after storing, dead workers' entries reclaimed, cancellations."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from inference.guidance.plan import guidance_prompt
from scheduler.config import SchedulerConfig
from scheduler.cost import PRESETS
from scheduler.metrics import FIRST_TOKEN_WEIGHT
from scheduler.policies import make_scheduler
from triage import realtime
from triage.contracts import Cancel, ConfigChanged, Regenerate
from triage.models import AuditEvent, Call, CallStatus, SchedulerSettings, TriageAssessment
from triage.redis_clients import redis_bytes_client
from triage.selectors.calls import guidance_plan
from worker.inference_worker import InferenceWorker, WorkerOptions

pytestmark = pytest.mark.django_db(transaction=True)

TRANSCRIPTS = [
    "My husband just collapsed in the kitchen, he is not breathing and I cannot wake him.",
    "I have a question about my prescription refill.",
    "I have a small cut on my hand, it stopped bleeding.",
    "My son is choking on a piece of meat, he cannot cough or speak.",
]


@pytest.fixture
def stream_names():
    r = redis_bytes_client()
    suffix = uuid.uuid4().hex[:8]
    names = {"stream": f"test:inference:{suffix}", "control": f"test:control:{suffix}"}
    yield names
    r.delete(names["stream"], f"{names['stream']}:complete")


@pytest.fixture
def make_worker(tiny_backend, stream_names):
    workers = []

    def make(consumer: str = "w1", claim_idle_ms: int = 30_000, max_new_tokens: int = 24,
             speculative_tokens: int = 0) -> InferenceWorker:
        scheduler = make_scheduler(SchedulerConfig(policy="semantic", batch_size=8), PRESETS["a100-4b"])
        engine = tiny_backend.make_engine(scheduler, max_new_tokens=max_new_tokens,
                                          speculative_tokens=speculative_tokens)
        worker = InferenceWorker(engine, redis_bytes_client(), WorkerOptions(
            stream=stream_names["stream"], group="inference", consumer=consumer,
            control_channel=stream_names["control"], claim_idle_ms=claim_idle_ms, flush_interval_s=0.05,
        ))
        workers.append(worker)
        return worker

    yield make
    for w in workers:
        w.request_stop()
        if w._threads:  # started: its run() (if any) has returned or returns now
            w.stopped.wait(5)
            w.stopped.set()  # a worker whose run() never ran: its threads end (and close their connections)
            for t in w._threads:
                t.join(5)


def _calls(n: int, status: str = CallStatus.QUEUED) -> list[Call]:
    calls = [
        Call.objects.create(external_id=f"eng-{uuid.uuid4().hex[:10]}", received_at=timezone.now(),
                            transcript=TRANSCRIPTS[i % len(TRANSCRIPTS)], status=status, level=1 + i % 5)
        for i in range(n)
    ]
    redis_bytes_client().delete(*[realtime.token_stream_key(c.pk) for c in calls])
    return calls


def _enqueue(stream: str, calls: list[Call]) -> list[str]:
    r = redis_bytes_client()
    return [
        r.xadd(stream, {"call_id": c.pk, "level": c.level, "predicted_output_tokens": 24,
                        "enqueued_at": f"{time.time():.6f}"})
        for c in calls
    ]


def _run_until(worker: InferenceWorker, done: callable, timeout_s: float = 60.0) -> threading.Thread:
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not done():
        time.sleep(0.1)
    worker.request_stop()
    thread.join(30)
    return thread


def _all_final(calls: list[Call]) -> bool:
    return Call.objects.filter(pk__in=[c.pk for c in calls], status__in=[CallStatus.DONE, CallStatus.CANCELLED]).count() == len(calls)


def test_calls_from_the_stream_are_generated_stored_streamed_and_acknowledged(make_worker, stream_names):
    calls = _calls(4)
    worker = make_worker()
    worker.start()
    _enqueue(stream_names["stream"], calls)
    _run_until(worker, lambda: _all_final(calls))
    r = redis_bytes_client()
    for c in calls:
        c.refresh_from_db()
        assert c.status == CallStatus.DONE and c.output_tokens > 0 and c.guidance
        replay = realtime.read_token_replay(c.pk)
        assert replay.done and replay.text.strip() == c.guidance
        assert c.audit_events.filter(action="call.done").count() == 1
    assert r.xpending(stream_names["stream"], "inference")["pending"] == 0


def test_entries_left_pending_by_a_dead_worker_are_reclaimed_and_none_is_generated_twice(make_worker, stream_names):
    calls = _calls(3)
    already_done = _calls(1, status=CallStatus.DONE)[0]
    worker = make_worker(consumer="dead")
    worker.ensure_group()
    _enqueue(stream_names["stream"], calls + [already_done])
    r = redis_bytes_client()
    r.xreadgroup("inference", "dead", {stream_names["stream"]: ">"}, count=10)  # read, then the worker "dies"
    assert r.xpending(stream_names["stream"], "inference")["pending"] == 4

    survivor = make_worker(consumer="survivor", claim_idle_ms=0)
    survivor.start()
    assert len(survivor.engine.sequences) == 3  # the final call was acknowledged, not admitted
    _run_until(survivor, lambda: _all_final(calls))
    for c in calls:
        c.refresh_from_db()
        assert c.status == CallStatus.DONE
        assert c.audit_events.filter(action="call.done").count() == 1
    assert r.xpending(stream_names["stream"], "inference")["pending"] == 0


def test_a_cancelled_call_stops_generating_and_its_entry_is_acknowledged(make_worker, stream_names):
    calls = _calls(2)
    worker = make_worker(max_new_tokens=200)
    worker.start()
    _enqueue(stream_names["stream"], calls)
    time.sleep(0.3)
    victim = calls[1]
    Call.objects.filter(pk=victim.pk).update(status=CallStatus.CANCELLED)  # what call_cancel did in the web
    worker.handle_control(Cancel(call_id=victim.pk))
    _run_until(worker, lambda: _all_final(calls))
    assert Call.objects.get(pk=victim.pk).status == CallStatus.CANCELLED
    assert redis_bytes_client().xpending(stream_names["stream"], "inference")["pending"] == 0


def _assess(call: Call, protocol: str) -> None:
    from judgment.protocols import load_library

    TriageAssessment.objects.create(
        call=call, predicted_esi=call.level, probabilities=[0.2] * 5, predicted_output_tokens=24, model_version="test",
        latency_ms=1, protocol=protocol, protocol_family=load_library().protocols[protocol].family,
    )


@pytest.mark.parametrize("finished_first", [False, True])
def test_a_protocol_switch_generates_the_call_again_under_its_new_protocol(make_worker, stream_names, finished_first):
    """Whether the old generation is running or already finished (its result not yet stored), the worker admits
    the call again under the plan the database now gives it; the old result is never stored."""
    [call] = _calls(1)
    _assess(call, "fall")
    worker = make_worker(max_new_tokens=200)
    worker.start()
    _enqueue(stream_names["stream"], [call])
    assert _wait(lambda: str(call.pk) in worker.engine.sequences, 10)
    if finished_first:
        while str(call.pk) in worker.engine.sequences:
            worker._record(worker.engine.step())  # finished in the engine, not flushed
    TriageAssessment.objects.filter(call=call).update(protocol="choking", protocol_family="cardiorespiratory")
    Call.objects.filter(pk=call.pk).update(guidance_generation=1)  # what call_switch_protocol did in the web
    worker.handle_control(Regenerate(call_id=call.pk))
    _run_until(worker, lambda: _all_final([call]))
    call.refresh_from_db()
    assert (call.status, call.guidance_protocol, call.guidance_band) == (CallStatus.DONE, "choking", "1-2")
    assert redis_bytes_client().xpending(stream_names["stream"], "inference")["pending"] == 0


def _scrape(url: str) -> dict[tuple[str, tuple], float]:
    from urllib.request import urlopen

    from prometheus_client.parser import text_string_to_metric_families

    with urlopen(url, timeout=5) as response:
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_prometheus_metrics_per_worker_with_ttft_and_e2e_histograms_by_esi(make_worker, stream_names):
    """Scraped over HTTP as Prometheus would: queue depth, preemptions, tokens, KV use, and per-ESI TTFT and E2E
    histograms counting every call generated, labelled with the worker's name."""
    import socket

    calls = _calls(2)
    worker = make_worker(consumer="scraped")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    worker.opts.metrics_port = port
    worker.start()
    _enqueue(stream_names["stream"], calls)
    thread = _run_in_background(worker)
    assert _wait(lambda: _all_final(calls))
    time.sleep(3 * worker.opts.metrics_interval_s)  # the engine loop refreshes the snapshot a scrape reads
    samples = _scrape(f"http://127.0.0.1:{port}/metrics")
    worker.request_stop()
    thread.join(30)
    w = ("worker", "scraped")
    assert ("triage_inference_queue_depth", (("esi", "1"), w)) in samples
    assert ("triage_inference_preemptions_total", (("mode", "swap"), w)) in samples
    assert samples[("triage_inference_tokens_total", (w,))] > 0
    assert ("triage_inference_kv_use_ratio", (w,)) in samples
    assert ("triage_inference_off_protocol_sentences_total", (w,)) in samples
    assert ("triage_inference_draft_tokens_total", (("outcome", "accepted"), w)) in samples
    assert 0 < samples[("triage_inference_cost_correction", (w,))] != 1.0  # the engine's cost model, corrected
    for level in {c.level for c in calls}:  # every token generated adds to its ESI's TDG gain, on time or late
        assert sum(samples[("triage_inference_tdg_gain_total", (("esi", str(level)), ("outcome", outcome), w))]
                   for outcome in ("on_time", "late")) > 0
    # The dashboard and alert rules in docs/observability/ query only series the worker exports.
    import re
    from pathlib import Path

    docs = Path(__file__).resolve().parents[2] / "docs" / "observability"
    queried = set(re.findall(r"triage_(?:inference|slo|surge)_[a-z0-9_]+",
                             "".join(p.read_text() for p in docs.iterdir() if p.suffix in (".yml", ".json"))))
    assert queried and queried <= {name for name, _ in samples}
    for level in {c.level for c in calls}:
        n = sum(c.level == level for c in calls)
        assert samples[("triage_inference_ttft_seconds_count", (("esi", str(level)), w))] == n
        assert samples[("triage_inference_e2e_seconds_count", (("esi", str(level)), w))] == n


def _wait(predicate, timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def _run_in_background(worker: InferenceWorker) -> threading.Thread:
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return thread


def test_a_database_outage_neither_stops_the_intake_nor_loses_results(make_worker, stream_names):
    """Every connection the worker holds is killed by PostgreSQL (a failover, a restart): calls that arrive
    next are still read, generated and stored, and results of that moment are stored at a later flush."""
    first, *later = _calls(3)
    worker = make_worker()
    worker.start()
    _enqueue(stream_names["stream"], [first])
    thread = _run_in_background(worker)
    assert _wait(lambda: _all_final([first]))
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        assert cursor.fetchone()[0] >= 2  # the intake thread's and the engine loop's
    _enqueue(stream_names["stream"], later)
    assert _wait(lambda: _all_final(later)), [c.status for c in Call.objects.filter(pk__in=[c.pk for c in later])]
    worker.request_stop()
    thread.join(30)
    assert worker._threads[0].is_alive() or worker.stopped.is_set()
    assert redis_bytes_client().xpending(stream_names["stream"], "inference")["pending"] == 0


def test_a_call_re_enqueued_after_a_stray_entry_is_generated_and_both_entries_acknowledged(make_worker, stream_names):
    """A commit that failed after its XADD leaves an entry for a call still `triaged`: the worker generates it,
    but the call refuses the results. When the sweep queues the call again with a new entry, that entry must
    be generated, not taken for a duplicate of the first."""
    [call] = _calls(1, status=CallStatus.TRIAGED)
    worker = make_worker()
    worker.start()
    _enqueue(stream_names["stream"], [call])
    thread = _run_in_background(worker)
    assert _wait(lambda: worker.stats["tokens"] > 0 and not worker.engine.sequences)
    time.sleep(0.2)  # a flush or two: the results are refused
    assert Call.objects.get(pk=call.pk).status == CallStatus.TRIAGED
    Call.objects.filter(pk=call.pk).update(status=CallStatus.QUEUED)  # what the sweep's calls_enqueue does,
    _enqueue(stream_names["stream"], [call])  # with its XADD
    assert _wait(lambda: _all_final([call]))
    worker.request_stop()
    thread.join(30)
    assert redis_bytes_client().xpending(stream_names["stream"], "inference")["pending"] == 0


def test_a_call_is_admitted_at_its_current_level_not_the_one_in_its_stream_entry(make_worker, stream_names):
    """A dispatcher raised the call from ESI 4 to ESI 1 while no worker was listening (a restart): the
    re-prioritise message is gone, the stream entry still says 4."""
    [call] = _calls(1)
    Call.objects.filter(pk=call.pk).update(level=4)
    call.level = 4
    _enqueue(stream_names["stream"], [call])
    Call.objects.filter(pk=call.pk).update(level=1)
    worker = make_worker()
    worker.start()
    assert _wait(lambda: str(call.pk) in worker.engine.sequences, 10)
    assert worker.engine.sequences[str(call.pk)].request.level == 1


def test_an_entry_left_by_another_database_generates_the_call_its_id_now_names(make_worker, stream_names):
    """A Redis that outlived its database (or that a test run shared) still holds an entry for call id N with
    another call's prompt, level and arrival: the worker generates call N as the database has it."""
    [call] = _calls(1)
    Call.objects.filter(pk=call.pk).update(level=2)
    redis_bytes_client().xadd(stream_names["stream"], {
        "call_id": call.pk, "level": 5, "predicted_output_tokens": 24, "enqueued_at": "1000.0", "accepted_at": "1000.0",
    })
    worker = make_worker()
    worker.start()
    assert _wait(lambda: str(call.pk) in worker.engine.sequences, 10)
    sequence = worker.engine.sequences[str(call.pk)]
    plan = guidance_plan(protocol="", family="", level=2, patient_age=None)  # a call assessed with no protocol
    assert worker.engine.codec.decode(sequence.token_ids[: sequence.prompt_len]) == guidance_prompt(plan, call.transcript)
    assert sequence.request.level == 2
    assert sequence.request.arrival_s == pytest.approx(Call.objects.get(pk=call.pk).created_at.timestamp())


def test_a_policy_change_in_the_settings_takes_over_the_running_calls(make_worker, stream_names):
    calls = _calls(4)
    worker = make_worker(max_new_tokens=200)
    worker.start()
    _enqueue(stream_names["stream"], calls)
    thread = _run_in_background(worker)
    assert _wait(lambda: worker.stats["tokens"] >= 4)
    SchedulerSettings.objects.filter(pk=SchedulerSettings.load().pk).update(policy="fcfs")
    worker.handle_control(ConfigChanged(version=0))
    assert _wait(lambda: worker.engine.scheduler.name == "fcfs", 10)
    assert not _all_final(calls)  # the switch happened with calls in flight
    assert _wait(lambda: _all_final(calls))
    worker.request_stop()
    thread.join(30)
    for c in calls:
        c.refresh_from_db()
        assert c.status == CallStatus.DONE and c.audit_events.filter(action="call.done").count() == 1
    assert redis_bytes_client().xpending(stream_names["stream"], "inference")["pending"] == 0


def test_redis_restarted_empty_under_a_running_worker_loses_no_call(make_worker, stream_names):
    """Redis comes back without the stream, its consumer group or anything else: the worker recreates the group
    and puts back, from the database, the calls the lost stream held; they and later calls are generated."""
    first, *lost = _calls(3)
    worker = make_worker()
    worker.start()
    _enqueue(stream_names["stream"], [first])
    thread = _run_in_background(worker)
    assert _wait(lambda: _all_final([first]))
    r = redis_bytes_client()
    r.delete(stream_names["stream"], f"{stream_names['stream']}:complete")  # the restart, as the worker sees it
    assert _wait(lambda: _all_final(lost)), [c.status for c in Call.objects.filter(pk__in=[c.pk for c in lost])]
    [later] = _calls(1)
    _enqueue(stream_names["stream"], [later])
    assert _wait(lambda: _all_final([later]))
    worker.request_stop()
    thread.join(30)
    assert all(c.audit_events.filter(action="call.done").count() == 1 for c in [first, *lost, later])
    assert r.xpending(stream_names["stream"], "inference")["pending"] == 0


def test_a_malformed_entry_is_acknowledged_and_neither_stops_the_intake_nor_a_restart(make_worker, stream_names):
    calls = _calls(2)
    r = redis_bytes_client()
    dead = make_worker(consumer="dead")
    dead.ensure_group()
    r.xadd(stream_names["stream"], {"call_id": "not-a-number"})
    _enqueue(stream_names["stream"], calls[:1])
    r.xadd(stream_names["stream"], {"level": "1"})
    r.xreadgroup("inference", "dead", {stream_names["stream"]: ">"}, count=10)  # read, then the worker "dies"

    survivor = make_worker(consumer="survivor", claim_idle_ms=0)
    survivor.start()  # takes the dead worker's entries over, the malformed ones included
    thread = _run_in_background(survivor)
    r.xadd(stream_names["stream"], {"call_id": str(calls[1].pk), "level": "many", "predicted_output_tokens": "?"})
    assert _wait(lambda: _all_final(calls)), [c.status for c in Call.objects.filter(pk__in=[c.pk for c in calls])]
    survivor.request_stop()
    thread.join(30)
    assert r.xpending(stream_names["stream"], "inference")["pending"] == 0


class _FailingSteps:
    """Fault injection: the model's forward pass raises (as a CUDA out-of-memory would) while ``failing``."""

    def __init__(self, runner, failing: int):
        self.runner, self.real_step, self.failing = runner, runner.step, failing
        runner.step = self

    def __call__(self, rows):
        if self.failing > 0:
            self.failing -= 1
            raise RuntimeError("CUDA out of memory (injected)")
        return self.real_step(rows)


def test_a_model_failure_on_a_batch_generates_its_calls_again_without_stopping_the_worker(make_worker, stream_names):
    calls = _calls(2)
    worker = make_worker()
    _FailingSteps(worker.engine.runner, failing=1)
    worker.start()
    _enqueue(stream_names["stream"], calls)
    _run_until(worker, lambda: _all_final(calls))
    for c in calls:
        c.refresh_from_db()
        assert c.status == CallStatus.DONE and c.guidance
    assert worker.stats["generation_errors"] >= 1
    assert redis_bytes_client().xpending(stream_names["stream"], "inference")["pending"] == 0


def test_a_call_the_model_keeps_failing_on_is_failed_with_its_reason_and_the_worker_goes_on(make_worker, stream_names):
    from worker.sink import MAX_GENERATION_ATTEMPTS

    [doomed] = _calls(1)
    worker = make_worker()
    faults = _FailingSteps(worker.engine.runner, failing=MAX_GENERATION_ATTEMPTS)
    worker.start()
    _enqueue(stream_names["stream"], [doomed])
    thread = _run_in_background(worker)
    assert _wait(lambda: Call.objects.get(pk=doomed.pk).status == CallStatus.FAILED)
    doomed.refresh_from_db()
    assert "out of memory" in doomed.failure_reason
    assert faults.failing == 0 and thread.is_alive()
    [later] = _calls(1)
    _enqueue(stream_names["stream"], [later])
    assert _wait(lambda: _all_final([later]))
    worker.request_stop()
    thread.join(30)
    assert redis_bytes_client().xpending(stream_names["stream"], "inference")["pending"] == 0


def test_a_burst_of_urgent_calls_turns_surge_protection_on_and_calm_turns_it_off_audited_and_exported(
    make_worker, stream_names
):
    """Sixty ESI-1 and ESI-2 calls at once on an 8-wide batch: the waits pass the 0.5 s and 1 s TTFT targets,
    the controller opens extra slots for them, every call completes, and after the calm (shortened here) the
    administrator's configuration is back. Each change is an audit row and the exported gauge follows."""
    calls = [
        Call.objects.create(external_id=f"surge-{uuid.uuid4().hex[:10]}", received_at=timezone.now(),
                            transcript=TRANSCRIPTS[i % 2 * 3], status=CallStatus.QUEUED, level=1 + i % 2)
        for i in range(60)
    ]
    worker = make_worker(max_new_tokens=200)
    worker.surge.driver.controller.min_dwell_s = 2.0
    worker.start()
    _enqueue(stream_names["stream"], calls)
    thread = _run_in_background(worker)
    widest = []
    assert _wait(lambda: widest.append(worker.engine.scheduler.config.surge_extra_slots) or _all_final(calls), 120)
    assert _wait(lambda: worker.surge.mode == "normal", 30)
    time.sleep(3 * worker.opts.metrics_interval_s)
    protect_seen = worker.metrics.snapshot["surge_protect"]
    worker.request_stop()
    thread.join(30)
    changes = list(AuditEvent.objects.filter(action="surge.mode_changed").order_by("id").values_list("data", "actor"))
    assert [d["mode"] for d, _ in changes] == ["protect", "normal"]
    assert changes[0][1] == "system:inference" and changes[0][0]["extra_slots"] == 24  # 4 x 8 wide, less 8
    assert max(widest) == 24 and worker.engine.scheduler.config.surge_extra_slots == 0
    assert worker.engine.scheduler.config.batch_size == 8 and protect_seen == 0
    assert Call.objects.filter(pk__in=[c.pk for c in calls], status=CallStatus.DONE).count() == len(calls)


def test_with_surge_control_off_the_schedule_is_never_changed(make_worker, stream_names):
    calls = _calls(12)
    worker = make_worker()
    worker.surge.enabled = False
    worker.start()
    _enqueue(stream_names["stream"], calls)
    thread = _run_in_background(worker)
    assert _wait(lambda: _all_final(calls))
    worker.request_stop()
    thread.join(30)
    assert not AuditEvent.objects.filter(action="surge.mode_changed").exists()
    assert worker.engine.scheduler.config.surge_extra_slots == 0


def test_in_protect_mode_less_urgent_calls_get_key_questions_only_and_esi_1_2_full_guidance(make_worker, stream_names):
    """The first degradation step of a surge: an ESI-4 call admitted in protect mode reads out its protocol
    family's key questions (a shorter plan), audited on the call and counted; an ESI-2 call keeps its band."""
    from judgment.protocols import load_library
    from scheduler.slo import SurgeMode
    from triage.selectors.calls import calls_generation_input

    urgent, minor = _calls(2)
    Call.objects.filter(pk=urgent.pk).update(level=2)
    Call.objects.filter(pk=minor.pk).update(level=4)
    for call in (urgent, minor):
        call.refresh_from_db()
        _assess(call, "fall")
    full = calls_generation_input(call_ids=[minor.pk])[minor.pk]
    worker = make_worker(max_new_tokens=200)
    worker.surge.driver.controller._enter(SurgeMode.PROTECT, time.time())  # a burst the test need not build
    worker.start()
    _enqueue(stream_names["stream"], [urgent, minor])
    _run_until(worker, lambda: _all_final([urgent, minor]))
    for call in (urgent, minor):
        call.refresh_from_db()
        assert call.status == CallStatus.DONE
    briefed = AuditEvent.objects.filter(action="call.guidance_brief")
    assert list(briefed.values_list("call_id", flat=True)) == [minor.pk]
    assert briefed.get().data["level"] == 4 and worker.stats["brief_guidance"] == 1
    assert minor.guidance_brief and not urgent.guidance_brief  # shown on the board and in the API
    key_questions = load_library().families[full.plan.family].key_questions
    assert any(q in minor.guidance for q in key_questions)
    assert not any(s in minor.guidance for s in full.plan.sentences[1:])  # the band's own lines are not read out


def test_the_token_level_deadline_gain_counts_every_token_against_its_tiers_deadline_by_esi(make_worker, stream_names):
    """PROSERVE's TDG, live: each generated token adds its tier's weight (times FIRST_TOKEN_WEIGHT for the first)
    to its ESI's gain, on time when delivered by acceptance + TTFT target + (i - 1) * TPOT target, else late; a
    call accepted an hour ago is late at every token."""
    calls = _calls(2)  # ESI 1 and 2
    old = calls[1]
    Call.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(hours=1))
    worker = make_worker(consumer="tdg")
    worker.start()
    _enqueue(stream_names["stream"], calls)
    _run_until(worker, lambda: _all_final(calls))
    gain = worker.metrics.compute()["tdg_gain"]
    config = worker.engine.current_config()
    for c in calls:
        c.refresh_from_db()
        assert c.status == CallStatus.DONE and c.output_tokens > 1
        ideal = config.tier_for(None, c.level).tdg_weight * (FIRST_TOKEN_WEIGHT + c.output_tokens - 1)
        assert gain[(str(c.level), "on_time")] + gain[(str(c.level), "late")] == pytest.approx(ideal)
    assert gain[(str(old.level), "on_time")] == 0.0 and gain[(str(old.level), "late")] > 0
    assert gain[("5", "on_time")] == gain[("5", "late")] == 0.0  # no call of that level


def test_speculative_guidance_is_the_same_text_and_its_acceptance_is_audited_and_counted(make_worker, stream_names):
    """With drafts on, each call's stored guidance is what the plain engine stores, the DONE audit row carries the
    share of drafted tokens the model accepted, and the worker counts accepted and rejected drafts."""
    texts = {}
    for drafts in (0, 8):
        calls = _calls(2)
        for call in calls:
            _assess(call, "fall")
        worker = make_worker(consumer=f"spec{drafts}", max_new_tokens=120, speculative_tokens=drafts)
        worker.start()
        _enqueue(stream_names["stream"], calls)
        _run_until(worker, lambda calls=calls: _all_final(calls))
        texts[drafts] = [Call.objects.get(pk=c.pk).guidance for c in calls]
        done = AuditEvent.objects.filter(call_id__in=[c.pk for c in calls], to_status=CallStatus.DONE)
        assert done.count() == 2
        if drafts:
            assert all(0.0 <= e.data["draft_acceptance"] <= 1.0 for e in done)
            assert worker.stats["draft_tokens_accepted"] > 0
            assert worker.metrics.compute()["draft_tokens"]["accepted"] == worker.stats["draft_tokens_accepted"]
        else:
            assert not any("draft_acceptance" in e.data for e in done)
    assert texts[8] == texts[0] and all(texts[0])
