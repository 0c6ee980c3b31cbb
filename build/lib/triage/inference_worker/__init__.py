"""The inference worker process: Redis stream in, engine loop, tokens and state out.

A Django process (it reads and writes calls), so it lives on Django's side; the engine it drives
(``inference.engine``) knows nothing of Django. Its parts, one concern each:

- ``intake.StreamIntake``: the stream's consumer-group protocol — reclaim what a dead worker left pending, read
  new entries, heartbeat this worker's own, and admit each call as the database has it (thread "intake");
- ``sink.ResultSink``: after every engine iteration, buffer state changes, tokens and results; every
  ``flush_interval_s`` publish the tokens, store the transitions and results in one transaction, and only then
  acknowledge the stream entries of the calls whose result is stored;
- ``metrics.WorkerMetrics``: the engine's metrics for the board (Redis hash) and Prometheus (HTTP, optional);
- ``worker.InferenceWorker``: the engine loop (thread "main") and the control channel (thread "control":
  config reloads, re-prioritisation, cancellation, regeneration after a protocol switch).

SIGTERM: stop reading, finish what was admitted (drain), flush, exit. Anything unfinished stays pending in
the stream and is reclaimed by the next worker: no call is lost, none is stored twice.
"""

from .worker import InferenceWorker, WorkerOptions

__all__ = ["InferenceWorker", "WorkerOptions"]
