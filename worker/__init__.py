"""The inference worker process: Redis stream in, engine loop, tokens and state out.

Run by ``manage.py run_inference_worker`` (compose's ``inference`` service), one process per engine. A Django
app without models: it reads and writes calls through the dispatch app's selectors and services
(``triage``); the engine it drives (``inference.engine``) knows nothing of Django. Its parts, one concern each:

- ``intake.StreamIntake``: the stream's consumer-group protocol — reclaim what a dead worker left pending, read
  new entries, heartbeat this worker's own, and admit each call as the database has it (thread "intake");
- ``sink.ResultSink``: after every engine iteration, buffer state changes, tokens and results; every
  ``flush_interval_s`` publish the tokens, store the transitions and results in one transaction, and only then
  acknowledge the stream entries of the calls whose result is stored;
- ``metrics.WorkerMetrics``: the engine's metrics for the board (Redis hash) and Prometheus (HTTP, optional);
- ``inference_worker.InferenceWorker``: the engine loop (thread "main") and the control channel (thread "control":
  config reloads, re-prioritisation, cancellation, regeneration after a protocol switch).

SIGTERM: stop reading, finish what was admitted (drain), flush, exit. Anything unfinished stays pending in
the stream and is reclaimed by the next worker: no call is lost, none is stored twice.

Nothing is imported here: Django imports this package while its app registry is still loading.
"""
