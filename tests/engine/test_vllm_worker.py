"""The inference worker as a client of vLLM servers (INFERENCE_BACKEND=vllm): real `manage.py
run_inference_worker` and real vLLM servers running our plug-in, calls put on the stream by the triage
service. Killing one of two replicas mid-burst loses no call: its calls are resubmitted to the other."""

from __future__ import annotations

import signal
import time
from collections import Counter

import pytest

from inference.backends.vllm_replica import server_metric
from tests.engine.worker_calls import burst, statuses
from triage.audit_actions import AuditAction
from triage.models import AuditEvent, Call, CallStatus
from triage.services.errors import InvalidTransition

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

IN_FLIGHT = (CallStatus.PREFILLING, CallStatus.DECODING, CallStatus.PREEMPTED)


def _wait_for(predicate, timeout_s: float, what: str, log) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n--- worker log ---\n{log()[-4000:]}")
        time.sleep(0.05)


def _vllm_env(servers) -> dict[str, str]:  # noqa: ANN001
    return {"INFERENCE_BACKEND": "vllm", "VLLM_URLS": ",".join(s.url for s in servers), "VLLM_MAX_NUM_SEQS": "2",
            "VLLM_EVENTS": ",".join(s.events for s in servers)}


@pytest.fixture(scope="module")
def replicas(vllm_servers):  # noqa: ANN201
    return vllm_servers(2, max_num_seqs=2)


def test_the_worker_streams_guidance_from_vllm_and_stores_each_call_once(replicas, start_inference_worker,
                                                                       monkeypatch):
    ids = burst(6, monkeypatch)
    worker = start_inference_worker("vllm-one", extra_env=_vllm_env(replicas))
    _wait_for(lambda: set(statuses(ids).values()) == {CallStatus.DONE}, 90, "every call done", worker.log)
    calls = Call.objects.filter(pk__in=ids)
    assert all(c.guidance and c.output_tokens > 0 for c in calls)
    done = Counter(AuditEvent.objects.filter(call_id__in=ids, to_status=CallStatus.DONE).values_list("call_id", flat=True))
    assert set(done.values()) == {1}
    assert "vllm-semantic" in worker.log()


def test_calls_cancelled_mid_burst_are_aborted_and_never_stored_as_done(replicas, start_inference_worker,
                                                                       monkeypatch):
    from triage.services.calls import call_cancel

    # Enough calls for the last ones to wait a while behind four slots: the tiny model is fast, so a call may
    # start and finish between two reads of the database.
    ids = burst(60, monkeypatch, predicted_output_tokens=120)
    worker = start_inference_worker("vllm-cancel", extra_env=_vllm_env(replicas), max_new_tokens=160)
    started = (*IN_FLIGHT, CallStatus.DONE)
    _wait_for(lambda: any(s in started for s in statuses(ids).values()), 90, "a call started", worker.log)
    current = statuses(ids)
    # one call decoding, and the last three not started yet (queued at the worker or still on the stream)
    not_started = [i for i in reversed(ids) if current[i] not in (*IN_FLIGHT, CallStatus.DONE, CallStatus.CANCELLED)]
    chosen = [i for i in ids if current[i] == CallStatus.DECODING][:1] + not_started[:3]
    cancelled = []
    for call_id in chosen:
        try:
            call_cancel(call=Call.objects.get(pk=call_id), actor="system:test", reason="test")
        except InvalidTransition:
            continue  # it finished since it was read: nothing to cancel
        cancelled.append(call_id)
    others = [i for i in ids if i not in cancelled]
    _wait_for(lambda: {statuses(others)[i] for i in others} == {CallStatus.DONE}, 120, "the others done", worker.log)
    assert {statuses(cancelled)[i] for i in cancelled} == {CallStatus.CANCELLED}
    assert not AuditEvent.objects.filter(call_id__in=cancelled, to_status=CallStatus.DONE).exists()
    assert len(cancelled) >= 2


def test_a_call_preempted_inside_a_vllm_server_is_recorded_preempted_with_an_audit_row(
    vllm_servers, start_inference_worker, monkeypatch
):
    """Two servers whose KV cache (four blocks of 128 tokens, one request at max_model_len) cannot hold three
    running calls once each passes 128 tokens (a prompt of about 90, an answer of about 60): vLLM preempts one
    on its own, through the plug-in's ``_preempt_request`` as on arrival, and the plug-in's notice makes the
    worker record it on the call (scheduler/preemption_notice.py). Deterministic: no race with an arrival."""
    tight = vllm_servers(2, max_num_seqs=3, kv_blocks=5)  # vLLM keeps one of the five blocks as its null block
    ids = burst(12, monkeypatch, predicted_output_tokens=200, levels=[5, 4] * 6)
    worker = start_inference_worker("vllm-preempt", extra_env={**_vllm_env(tight), "VLLM_MAX_NUM_SEQS": "3"},
                                    max_new_tokens=200)
    _wait_for(lambda: set(statuses(ids).values()) == {CallStatus.DONE}, 180, "every call done", worker.log)
    preempted = AuditEvent.objects.filter(call_id__in=ids, action=AuditAction.CALL_PREEMPTED)
    inside = sum(server_metric(s.url, "vllm:num_preemptions_total") for s in tight)
    assert preempted.count() >= 1 and inside >= 1, worker.log()[-3000:]
    assert {event.data.get("mode") for event in preempted} == {"drop"}  # vLLM recomputes its victims
    for call in Call.objects.filter(pk__in={event.call_id for event in preempted}):
        assert call.preemption_count >= 1 and call.last_preempted_at is not None
    done = Counter(AuditEvent.objects.filter(call_id__in=ids, to_status=CallStatus.DONE).values_list("call_id", flat=True))
    assert set(done.values()) == {1}  # each victim resumed on its server and was stored once


def test_killing_one_of_two_vllm_replicas_mid_burst_loses_no_call(replicas, start_inference_worker, monkeypatch):
    a, b = replicas  # the module's last test: it kills b
    ids = burst(60, monkeypatch, predicted_output_tokens=120)  # enough that both replicas are busy when b dies
    worker = start_inference_worker("vllm-two", extra_env=_vllm_env([a, b]), max_new_tokens=160)

    def mid_burst() -> bool:
        counts = Counter(statuses(ids).values())
        return counts[CallStatus.DONE] >= 2 and sum(counts[s] for s in IN_FLIGHT) >= 2

    _wait_for(mid_burst, 90, "some calls done and some mid-generation", worker.log)
    _wait_for(lambda: server_metric(b.url, "vllm:num_requests_running") > 0, 30, "calls running on b", worker.log)
    b.stop(signal.SIGKILL)
    _wait_for(lambda: set(statuses(ids).values()) == {CallStatus.DONE}, 180, "every call done", worker.log)
    assert "failed; its calls go back to the queue" in worker.log()
    calls = Call.objects.filter(pk__in=ids)
    assert all(c.guidance and c.output_tokens > 0 for c in calls)
    done = Counter(AuditEvent.objects.filter(call_id__in=ids, to_status=CallStatus.DONE).values_list("call_id", flat=True))
    assert set(done.values()) == {1}  # each call stored once
