"""The engine loop and the control channel of the inference worker (see the package docstring for its parts)."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter

import redis
from django.db import DatabaseError, close_old_connections, connection

from inference.engine import StepResult
from inference.executor import Executor
from inference.guidance.follow import GuidanceFollower
from inference.guidance.similarity import sentence_similarity
from triage.contracts import (
    Cancel,
    ConfigChanged,
    ControlMessage,
    Regenerate,
    Reprioritise,
    control_from_json,
)
from triage.selectors.calls import GenerationInput, calls_generation_input
from triage.selectors.scheduler import guard_similarity_threshold_load, scheduler_config_load
from triage.services.surge import call_guidance_brief_record
from worker.request_ids import request_id

from .intake import StreamIntake, WorkerOptions
from .metrics import WorkerMetrics
from .sink import ResultSink
from .surge import SurgeLoop

log = logging.getLogger("worker")

__all__ = ["InferenceWorker", "WorkerOptions"]


class InferenceWorker:
    def __init__(self, engine: Executor, client: redis.Redis, options: WorkerOptions) -> None:
        self.engine = engine
        self.redis = client
        self.opts = options
        self.stopping = threading.Event()  # stop reading the stream; drain
        self.stopped = threading.Event()
        self.reload_config = threading.Event()
        self._wake = threading.Event()
        self.stats: Counter[str] = Counter()
        self.guidance = GuidanceFollower()
        self._readmit: list[int] = []  # calls to admit again under their new plan (engine loop thread)
        self._guard_threshold: float | None = None  # strict until the settings say otherwise
        self.intake = StreamIntake(engine, client, options, self.guidance, wake=self._wake.set)
        self.metrics = WorkerMetrics(engine, self.stats, self.guidance, worker=options.consumer)
        self.sink = ResultSink(client, options, self.intake, self.guidance, self.stats, readmit=self._readmit.append,
                               metrics=self.metrics)
        self.surge = SurgeLoop(engine, self.metrics.slo, enabled=options.surge_control)
        self.intake.brief_levels, self.intake.on_brief = self.surge.brief_levels, self._briefed
        self._threads: list[threading.Thread] = []

    # --- lifecycle ----------------------------------------------------------------------------------------
    def ensure_group(self) -> None:
        self.intake.ensure_group()

    def claim_idle(self) -> int:
        return self.intake.claim_idle()

    def start(self) -> None:
        self._apply_guard_mode()
        self.intake.ensure_group()
        self.intake.reclaim()
        threads = ((lambda: self.intake.loop(self.stopping, self.stopped), "intake"), (self._control_loop, "control"))
        for target, name in threads:
            t = threading.Thread(target=target, name=f"inference-{name}", daemon=True)
            t.start()
            self._threads.append(t)
        if self.opts.metrics_port is not None:
            self.metrics.serve(self.opts.metrics_port, self.opts.metrics_host)

    def request_stop(self) -> None:
        """SIGTERM: stop taking new calls; the main loop drains what it has and returns."""
        self.stopping.set()
        self._wake.set()

    def run(self) -> None:
        """The engine loop; returns after request_stop() once drained (or the drain timeout)."""
        drain_deadline = None
        while True:
            if self.stopping.is_set():
                drain_deadline = drain_deadline or time.monotonic() + self.opts.drain_timeout_s
                if not self.engine.has_work() or time.monotonic() > drain_deadline:
                    break
            if self.reload_config.is_set():
                self.reload_config.clear()
                self._apply_config()
            if self._readmit:
                self._admit_again()
            if self.surge.tick() is not None:
                self.metrics.surge_mode = self.surge.mode
            if self.engine.has_work():
                self._record(self.engine.step())
            else:
                self._wake.wait(0.05)
                self._wake.clear()
            self._flush()
        self._flush(force=True)
        connection.close()
        self.stopped.set()
        self.metrics.stop()

    def _record(self, result: StepResult) -> None:
        self.sink.record(result)
        self.metrics.observe(len(result.tokens))

    def _flush(self, force: bool = False) -> None:
        if force or self.sink.due():
            self.sink.flush()
        self.metrics.publish(self.redis, every_s=self.opts.metrics_interval_s, force=force)

    # --- control ------------------------------------------------------------------------------------------
    def _control_loop(self) -> None:
        pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
        pubsub.subscribe(self.opts.control_channel)
        while not self.stopped.is_set():
            try:
                message = pubsub.get_message(timeout=0.5)
            except redis.RedisError:
                time.sleep(1.0)
                continue
            if message is None:
                continue
            try:
                control = control_from_json(message["data"])
            except ValueError:
                log.warning("bad control message: %r", message.get("data"))
                continue
            self.handle_control(control)
        pubsub.close()

    def handle_control(self, message: ControlMessage) -> None:
        if isinstance(message, ConfigChanged):
            self.reload_config.set()
        elif isinstance(message, Reprioritise):
            self.engine.reprioritise(request_id(message.call_id), message.level, message.tier)
        elif isinstance(message, Cancel):
            self.engine.cancel(request_id(message.call_id))
        elif isinstance(message, Regenerate):
            self.regenerate(message.call_id)
        self._wake.set()

    def regenerate(self, call_id: int) -> None:
        """Generate the call again under the plan the database now gives it (a protocol switch): cancel the
        running generation, then admit the call again with its arrival, so it keeps its place in the queue.
        A call this worker does not hold is another worker's (or not read yet: its plan is read at admission)."""
        rid = request_id(call_id)
        if rid in self.engine.sequences:
            self.guidance.regenerate(rid)
            self.engine.cancel(rid)  # admitted again when the engine reports the cancellation (the sink)
        elif self.intake.holds(call_id):
            self._readmit.append(call_id)  # finished here, its result not stored yet (it will not be)

    def _admit_again(self) -> None:
        ids = list(self._readmit)
        self._readmit.clear()  # the same list: the sink holds its append
        close_old_connections()
        current = calls_generation_input(call_ids=ids, brief_levels=self.surge.brief_levels())
        for call_id in ids:
            call = current.get(call_id)
            if call is None or request_id(call_id) in self.engine.sequences:
                continue  # final meanwhile, or admitted already from its new stream entry
            self.intake.add_to_engine(call_id, call)
            self.sink.pending.restart(call_id)

    def _briefed(self, call_id: int, call: GenerationInput) -> None:
        """A call admitted with key questions only (protect mode): counted, and audited on the call."""
        self.stats["brief_guidance"] += 1
        try:
            call_guidance_brief_record(call_id=call_id, level=call.level, generation=call.generation)
        except DatabaseError:  # the call is generated regardless; the metric counts it
            log.exception("brief guidance of call %s not audited: the database refused", call_id)

    def _apply_guard_mode(self) -> None:
        threshold = guard_similarity_threshold_load()
        if threshold == self._guard_threshold:
            return
        similarity = sentence_similarity() if threshold is not None else None
        self.guidance.use_similarity(similarity, threshold)
        self._guard_threshold = threshold
        log.info("stream guard: %s", "strict" if threshold is None else f"similarity >= {threshold:g}")

    def _apply_config(self) -> None:
        """Apply the stored settings between iterations; a new policy takes over every live request."""
        close_old_connections()
        before = self.engine.policy_name
        config = self.surge.administrator_changed(scheduler_config_load(base=self.surge.admin))
        self.engine.reconfigure(config)
        if self.engine.policy_name != before:
            log.info("scheduling policy switched from %s to %s", before, self.engine.policy_name)
        self._apply_guard_mode()
        log.info(
            "scheduler configuration reloaded: policy=%s batch_size=%d stage_merge=%s lower_prefill_share=%g eviction=%s",
            config.policy, config.batch_size, config.stage_merge, config.lower_prefill_share, config.eviction,
        )
