"""SIGKILL the real inference worker process mid-burst, start another one: no call is lost, none is stored
twice, none that was already stored is generated again (issue 4, "Done when").

Real processes against the test database and Redis: `manage.py run_inference_worker` with the tiny guidance
model, calls put on the stream by the triage service (`calls_triage_record` → on commit `calls_enqueue`,
exactly what the Celery task does).
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections import Counter

import pytest
from django.utils import timezone

from tests.engine.worker_calls import TRANSCRIPTS, burst, statuses
from tests.fixtures.services import WorkerProcess
from triage import realtime
from triage.models import ALLOWED_TRANSITIONS, Call, CallStatus
from triage.redis_clients import redis_bytes_client

pytestmark = pytest.mark.django_db(transaction=True)

# Several of the engine's batches (16), so calls finish in waves and a flush (every 0.1 s) finds some stored
# and some mid-generation: on a fast machine the tiny model took a 24-call burst from queued to done within
# one flush.
BURST = 96
MAX_NEW_TOKENS = 48
GROUP = "inference"
IN_FLIGHT = (CallStatus.PREFILLING, CallStatus.DECODING, CallStatus.PREEMPTED)


def _wait_for(predicate, timeout_s: float, what: str, worker: WorkerProcess, step_s: float = 0.02):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if worker.process.poll() is not None:
            raise AssertionError(f"the worker exited ({worker.process.returncode}) before {what}:\n{worker.log()[-3000:]}")
        time.sleep(step_s)
    raise AssertionError(f"not {what} within {timeout_s} s:\n{worker.log()[-3000:]}")


def _token_log(call_id: int) -> list[tuple[str, dict[str, str]]]:
    return realtime.redis_text_client().xrange(realtime.token_stream_key(call_id))


def _taken_over(log: str) -> int:
    """Entries a worker took over, at start ("reclaimed N") and later ("took over N")."""
    return sum(int(n) for n in re.findall(r"(?:reclaimed|took over) (\d+) (?:pending )?stream entries", log))


RESTARTS = {
    # docker restart: same hostname, same consumer; its own pending entries come back at once
    "same-consumer": ("first", ()),
    # a replacement under a new name, long after the dead worker's last heartbeat: taken over at start
    "new-consumer": ("second", ("--claim-idle-ms", "100")),
    # a replacement under a new name before the dead worker's entries are idle long enough: taken over by
    # the periodic claim once they are (a worker that only claimed at start left them pending for ever)
    "new-consumer-early": ("second", ("--claim-idle-ms", "6000")),
}


@pytest.mark.parametrize("restart", list(RESTARTS))
def test_sigkill_mid_burst_then_restart_loses_no_call_and_regenerates_none_already_stored(
    start_inference_worker, isolated_stream, monkeypatch, restart
):
    consumer, restart_args = RESTARTS[restart]
    stream = isolated_stream["TRIAGE_INFERENCE_STREAM"]
    r = redis_bytes_client()
    ids = burst(BURST, monkeypatch)
    entries = r.xrange(stream)
    assert sorted(int(f[b"call_id"]) for _, f in entries) == sorted(ids)  # one entry per call, on the stream
    assert set(statuses(ids).values()) == {CallStatus.QUEUED}

    first = start_inference_worker("first", *(restart_args if restart == "new-consumer-early" else ()))

    def mid_burst() -> bool:
        counts = Counter(statuses(ids).values())
        return counts[CallStatus.DONE] >= 2 and sum(counts[s] for s in IN_FLIGHT) >= 2

    _wait_for(mid_burst, 60, "some calls done and some mid-generation", first, step_s=0.01)
    os.kill(first.process.pid, signal.SIGKILL)  # the worker's python process itself: no drain, no flush
    assert first.process.wait(timeout=10) == -signal.SIGKILL
    time.sleep(0.3)  # a COMMIT the worker had already sent is finished by its PostgreSQL backend

    at_kill = statuses(ids)
    stored_before = {i for i, s in at_kill.items() if s == CallStatus.DONE}
    unfinished = {i for i, s in at_kill.items() if s != CallStatus.DONE}
    assert stored_before and unfinished and any(s in IN_FLIGHT for s in at_kill.values())
    tokens_before = {i: len(_token_log(i)) for i in stored_before}
    pending = r.xpending(stream, GROUP)
    assert pending["pending"] >= len(unfinished)  # the dead worker's unacknowledged entries

    second = start_inference_worker(consumer, *restart_args)
    _wait_for(lambda: set(statuses(ids).values()) == {CallStatus.DONE}, 60, "every call done", second, step_s=0.1)
    _wait_for(lambda: r.xpending(stream, GROUP)["pending"] == 0, 10, "every entry acknowledged", second)

    # Nothing lost: every call done with its guidance, one stream entry per call, all acknowledged.
    for call in Call.objects.filter(pk__in=ids):
        assert call.status == CallStatus.DONE and call.guidance.strip() and call.output_tokens > 0, call.pk
    assert len(r.xrange(stream)) == BURST
    groups = {g["name"].decode(): g for g in r.xinfo_groups(stream)}
    assert groups[GROUP]["pending"] == 0

    # Nothing generated twice to completion: the new worker admitted exactly the calls not stored at the kill,
    # and the token logs of calls stored before the kill got no new token.
    assert _taken_over(second.log()) == len(unfinished), second.log()[-3000:]
    for call_id in stored_before:
        assert len(_token_log(call_id)) == tokens_before[call_id], f"call {call_id} was generated again"
    for call_id in ids:
        done_markers = [f for _, f in _token_log(call_id) if "done" in f]
        assert len(done_markers) <= 1, call_id  # at most one finished generation published per call

    # The audit log tells one consistent story per call: an unbroken chain of allowed transitions from
    # `received` to a single `done`, written by the intake, the triage and the inference workers.
    for call in Call.objects.filter(pk__in=ids):
        chain = list(call.audit_events.order_by("created_at", "id").values_list("from_status", "to_status", "actor"))
        assert chain[0][:2] == ("", CallStatus.RECEIVED)
        for (_, previous_to, _), (from_status, to_status, _) in zip(chain, chain[1:], strict=False):
            assert from_status == previous_to, (call.pk, chain)
            assert to_status in ALLOWED_TRANSITIONS[from_status], (call.pk, chain)
        assert [t for _, t, _ in chain].count(CallStatus.DONE) == 1 and chain[-1][1] == CallStatus.DONE, chain
        assert {a for f, _, a in chain if f in (CallStatus.QUEUED, *IN_FLIGHT)} == {"system:inference"}


def test_a_live_workers_entries_are_not_taken_over_by_a_peer_but_a_dead_ones_are(tiny_backend, isolated_stream):
    """The heartbeat: a worker slower than `claim_idle_ms` keeps its calls; once it stops beating they move."""
    from scheduler.config import SchedulerConfig
    from scheduler.cost import PRESETS
    from scheduler.policies import make_scheduler
    from worker.inference_worker import InferenceWorker, WorkerOptions

    def worker(consumer: str) -> InferenceWorker:
        engine = tiny_backend.make_engine(make_scheduler(SchedulerConfig(), PRESETS["a100-4b"]), max_new_tokens=8)
        return InferenceWorker(engine, redis_bytes_client(), WorkerOptions(
            stream=isolated_stream["TRIAGE_INFERENCE_STREAM"], group=GROUP, consumer=consumer,
            control_channel=isolated_stream["TRIAGE_CONTROL_CHANNEL"], claim_idle_ms=600,
        ))

    calls = [
        Call.objects.create(external_id=f"hb-{i}", received_at=timezone.now(), transcript=TRANSCRIPTS[i],
                            status=CallStatus.QUEUED, level=2)
        for i in range(3)
    ]
    live, peer = worker("live"), worker("peer")
    live.start()  # reads and heartbeats; its engine loop is not run, so the calls stay in flight
    r = redis_bytes_client()
    for call in calls:
        r.xadd(isolated_stream["TRIAGE_INFERENCE_STREAM"], _entry_fields(call))
    deadline = time.monotonic() + 5
    while len(live.engine.sequences) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(live.engine.sequences) == 3
    try:
        time.sleep(1.5)  # well past claim_idle_ms since delivery
        assert peer.claim_idle() == 0 and not peer.engine.sequences
    finally:
        live.stopped.set()  # the live worker "dies": its intake thread stops, and with it the heartbeat
        for thread in live._threads:
            thread.join(5)
    time.sleep(0.8)
    assert peer.claim_idle() == 3
    assert sorted(peer.engine.sequences) == sorted(str(c.pk) for c in calls)


def _entry_fields(call: Call) -> dict[str, str | int]:
    # An entry as the triage service writes it: what to generate is read from the database.
    return {"call_id": call.pk, "level": call.level, "predicted_output_tokens": 8, "enqueued_at": f"{time.time():.6f}"}
