"""`manage.py loadtest`: replay calls through the real REST API, Celery triage and the inference worker, one
scheduling policy after another on the identical trace, and compare per-ESI latency against FCFS.

    manage.py loadtest --calls 200 --pattern burst --policy semantic,fcfs --json
    manage.py loadtest --pattern mass-casualty --calls 150 --rate 0.5 --duration 120 --policy semantic \
        --surge-control on,off --json           # a burst on a Poisson background, the surge controller on and off
    manage.py loadtest --backend vllm --pattern dispatch --rate 0.4 --calls 300 --max-num-seqs 4 \
        --policy fcfs,priority,semantic --json  # a dispatch centre's day where slots bind
    manage.py loadtest --backend vllm --replicas 2 --pattern dispatch --rate 0.4 --calls 150 --policy semantic \
        --routing soonest-start,gorouting --json   # the two routing rules over two servers
    manage.py loadtest --calls 200 --policy semantic --webhooks none,black-hole --json
                                                # every event to a receiver that never answers, and none

Without --url it starts the web server, the Celery worker and the inference worker itself (restarting Celery
and the inference worker, with `--policy P`, before each policy, on an inference stream of that run and policy
of their own). The policy is set in SchedulerSettings for the run (and restored after): it orders the
classifier's backlog as well as the LLM's queue, so `fcfs` is arrival order from intake to the last token (see
triage/services/batching.py). With --url it drives a running stack and measures whatever policy that stack
runs ("live").

With ``--backend vllm`` the servers are started afresh for each policy, with the same step budget
(``--max-num-batched-tokens``). ``--levels 1 --max-new-tokens 1`` replays only the calls triage puts at ESI 1
and asks each for one token: how soon those calls can have their first token at all on this machine, a floor
under every policy's ESI-1 TTFT on the full trace.

Per call, from the database: TTFT = first_token_at - created_at, E2E = done_at - created_at, normalized
wait = E2E / output_tokens (the worker stamps each transition with the time it happened in the engine);
preemptions by mode from the `call.preempted` audit rows. Per level also the TTFT's two parts: accepted ->
classified (`triage_p50`) and queued -> first token (`queued_to_first_token_p50`).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from urllib import request as urlrequest

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from scheduler.routing import DEFAULT_ROUTING, ROUTING_RULES
from tools.load_report import plot_ttft, ratios_to_fcfs, summarise
from tools.load_traces import CORPUS, load_trace, only_levels

LOADTEST_ACTOR = "system:loadtest"
WARM_UP = "lt-warm-up"  # external id prefix of the call sent before each policy's trace
LOCATION_FIELDS = ("location_lat", "location_lon", "location_uncertainty_m", "location_address")
# the incidents pattern's warm-up call: about nothing, so no call of the trace is linked to it
NEUTRAL_WARM_UP = (0.0, {"transcript": "Test call from the load test, no patient, please ignore it."})


class Command(BaseCommand):
    help = "Replay calls through the whole stack per scheduling policy; per-ESI TTFT/E2E and ratios to FCFS."

    def add_arguments(self, parser):  # noqa: ANN001
        parser.add_argument("--calls", type=int, default=200)
        parser.add_argument("--pattern", choices=["burst", "poisson", "mass-casualty", "dispatch", "incidents"],
                            default="burst",
                            help="dispatch: Poisson at --rate, a dispatch centre's ESI mix (3/17/40/28/12 %%) of "
                                 "written calls; set --rate to 0.8-0.95 of the calls/s a burst completes")
        parser.add_argument("--rate", type=float, default=5.0, help="calls per second (poisson; mass-casualty's background)")
        parser.add_argument("--duration", type=float, default=120.0, help="seconds of background (mass-casualty)")
        parser.add_argument("--burst-at", type=float, default=30.0, help="when the burst lands (mass-casualty)")
        parser.add_argument("--surge-control", default="on",
                            help="on, off or on,off: run each policy with the inference worker's surge control so")
        parser.add_argument("--policy", default="semantic,fcfs")
        parser.add_argument("--webhooks", default="none",
                            help="none, black-hole or none,black-hole: the client's webhook URL for the run "
                                 "(black-hole: a receiver that accepts connections and never answers)")
        parser.add_argument("--trace", default=str(CORPUS), help="JSONL of call records (transcript, ...)")
        parser.add_argument("--url", default=None, help="drive a running stack instead of starting one")
        parser.add_argument("--token", default=os.environ.get("TRIAGE_API_TOKEN"), help="API token (with --url)")
        parser.add_argument("--timeout", type=float, default=1800.0, help="seconds to wait per policy")
        parser.add_argument("--seed", type=int, default=7)
        parser.add_argument("--levels", default="",
                            help="replay only the calls of the trace that triage puts at these ESI levels (e.g. 1); "
                                 "with --max-new-tokens 1 it measures how soon those calls can have their first "
                                 "token at all, on this machine, whatever the policy")
        parser.add_argument("--json", action="store_true")
        parser.add_argument("--plot", default=None, help="write a PNG of per-ESI TTFT p50 per policy")
        parser.add_argument("--backend", choices=["hf", "vllm"], default=settings.TRIAGE["INFERENCE_BACKEND"],
                            help="our embedded engine, or vLLM servers started per policy (policies: semantic = "
                                 "our plug-in, priority and fcfs = vLLM's own)")
        parser.add_argument("--replicas", type=int, default=1, help="vLLM servers (--backend vllm)")
        parser.add_argument("--routing", default=settings.TRIAGE["VLLM_ROUTING"] or DEFAULT_ROUTING,
                            help=f"how the worker routes over the vLLM servers, comma-separated to compare "
                                 f"({', '.join(ROUTING_RULES)}; the semantic policy only)")
        parser.add_argument("--model", default=None,
                            help="the LLM (default INFERENCE_MODEL; e.g. models/load-smollm2 from "
                                 "`build_models --load-model`)")
        parser.add_argument("--max-new-tokens", type=int, default=384)
        parser.add_argument("--max-num-seqs", type=int, default=settings.TRIAGE["VLLM_MAX_NUM_SEQS"],
                            help="each vLLM server's batch (--backend vllm)")
        parser.add_argument("--max-num-batched-tokens", type=int,
                            default=settings.TRIAGE["VLLM_MAX_NUM_BATCHED_TOKENS"],
                            help="each vLLM server's step budget in tokens, the same for every policy "
                                 "(--backend vllm; 0: vLLM's default)")

    def handle(self, *args, **o) -> None:  # noqa: ANN002, ANN003
        trace = load_trace(Path(o["trace"]), o["calls"], o["pattern"], o["rate"], o["seed"], o["duration"],
                           o["burst_at"])
        if o["levels"]:
            trace = only_levels(trace, {int(level) for level in o["levels"].split(",")})
        policies = [p.strip() for p in o["policy"].split(",") if p.strip()]
        results = []
        if o["url"]:
            if not o["token"]:
                raise CommandError("--url needs --token (or TRIAGE_API_TOKEN)")
            ids = self._replay(o["url"], o["token"], trace, o["timeout"])
            results.append(summarise("live", ids))
        else:
            results = self._run_own_stack(trace, policies, o)
        fcfs = next((r for r in results if r["policy"].endswith("fcfs")), None)
        if fcfs is not None:
            for r in results:
                r["vs_fcfs"] = ratios_to_fcfs(r, fcfs)
        if o["json"]:
            self.stdout.write(json.dumps(results, indent=2))
        else:
            for r in results:
                self._print(r)
        if o["plot"]:
            plot_ttft(results, Path(o["plot"]))

    # --- the stack ----------------------------------------------------------------------------------------------
    def _run_own_stack(self, trace, policies: list[str], o: dict) -> list[dict]:  # noqa: ANN001
        from django.core.management import call_command

        from tools.black_hole import BlackHole
        from tools.stack import Stack, free_port
        from triage.models import SchedulerSettings
        from triage.services.clients import api_client_create
        from triage.services.config import scheduler_settings_update
        from triage.services.dispatch import triage_task_pending_key
        from triage.services.webhooks import api_client_set_webhook

        call_command("migrate", verbosity=0)
        issued = api_client_create(name=f"loadtest-{uuid.uuid4().hex[:8]}", throttle_rate="100000/min")
        token = issued.token
        run = uuid.uuid4().hex[:8]
        # A Celery queue of this run's own: another worker on the same Redis must not take its calls.
        queue = f"triage-loadtest-{run}"
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1",
                   TRIAGE_CELERY_QUEUE=queue)
        webhook_modes = [m.strip() for m in o["webhooks"].split(",") if m.strip()]
        if set(webhook_modes) - {"none", "black-hole"}:
            raise CommandError(f"--webhooks {o['webhooks']}: expected none, black-hole or both")
        black_hole = BlackHole() if "black-hole" in webhook_modes else None
        if black_hole is not None:
            env["TRIAGE_WEBHOOK_ALLOW_PRIVATE_NETWORKS"] = "1"  # the receiver is on loopback
        stack = Stack(env=env, log_dir=Path(settings.VAR_DIR) / "logs" / "loadtest")
        port = free_port()
        results = []
        configured = SchedulerSettings.current().policy
        # SIGTERM (a CI timeout, an operator) unwinds like Ctrl-C, so the children are stopped, not orphaned.
        previous = signal.signal(signal.SIGTERM, _interrupt)
        try:
            stack.start_web(port)
            vllm = o["backend"] == "vllm"
            routings = [r.strip() for r in o["routing"].split(",") if r.strip()]
            runs = [(p, s, r, w) for p in policies for s in o["surge_control"].split(",")
                    for r in (routings if vllm and p == "semantic" else routings[:1]) for w in webhook_modes]
            for policy, surge, routing, webhooks in runs:
                api_client_set_webhook(client=issued.client, actor=LOADTEST_ACTOR,
                                       url=black_hole.url if webhooks == "black-hole" else "")
                # With vLLM the stored policy only orders the classifier's backlog: arrival order for vLLM's
                # FCFS, by urgency otherwise, so the comparison isolates the LLM stage.
                stored = ("fcfs" if policy == "fcfs" else "semantic") if vllm else policy
                scheduler_settings_update(actor=LOADTEST_ACTOR, policy=stored)
                # A stream of this policy's own: entries left by an earlier (or crashed) run cannot leak in.
                stack.env = dict(env, TRIAGE_INFERENCE_STREAM=f"triage:loadtest:{run}:{policy}:{surge}:{routing}",
                                 VLLM_ROUTING=routing)
                for name in [n for n in stack.processes if n.startswith("vllm-")] + ["celery", "webhooks", "inference"]:
                    stack.stop(name)
                urls = self._start_vllm(stack, policy, o) if vllm else []
                stack.start_celery(beat=False)
                started = time.time()
                stack.start_inference(["--policy", policy, "--consumer", f"loadtest-{policy}",
                                       "--max-new-tokens", str(o["max_new_tokens"]),
                                       "--surge-control" if surge == "on" else "--no-surge-control",
                                       *(["--model", o["model"]] if o["model"] else [])])
                _wait_for_engine(started, timeout_s=180.0)
                # One call through triage first: the burst measures a warm triage worker, not its start-up
                # (spaCy's import and the catalogue's patterns take a few seconds per process).
                warm_up = [NEUTRAL_WARM_UP] if o["pattern"] == "incidents" else trace[:1]
                self._replay(f"http://127.0.0.1:{port}", token, warm_up, 180.0, until="queued", prefix=WARM_UP)
                ids = self._replay(f"http://127.0.0.1:{port}", token, trace, o["timeout"])
                label = f"vllm-{policy}" if vllm else policy
                if "," in o["surge_control"]:
                    label = f"{label}, surge control {surge}"
                if len(routings) > 1 and vllm and policy == "semantic":
                    label = f"{label}, {routing}"
                if len(webhook_modes) > 1:
                    label = f"{label}, webhooks {webhooks}"
                results.append(summarise(label, ids, since=started))
                if o["pattern"] == "incidents":
                    results[-1]["links"] = incident_link_quality(ids, trace)
                    _close_for_the_next_run(ids)
                if webhooks == "black-hole":  # connections it has held so far (this run's and earlier ones')
                    results[-1]["black_hole_connections"] = black_hole.accepted
                results[-1].update(backend=o["backend"], replicas=len(urls) or 1, webhooks=webhooks,
                                   model=o["model"] or env.get("INFERENCE_MODEL", settings.TRIAGE["INFERENCE_MODEL"]))
                if vllm:
                    results[-1]["routing"] = routing if policy == "semantic" else "least-loaded"
                    results[-1]["preemptions"]["vllm"] = _vllm_preemptions(urls)
                    results[-1]["max_num_batched_tokens"] = o["max_num_batched_tokens"] or "vLLM default"
                self.stderr.write(f"{label}: {results[-1]['completed']}/{len(ids)} calls done")
        finally:
            stack.stop_all()
            if black_hole is not None:
                black_hole.close()
            signal.signal(signal.SIGTERM, previous)
            _delete_keys(f"triage:loadtest:{run}:*", queue, triage_task_pending_key(queue))
            scheduler_settings_update(actor=LOADTEST_ACTOR, policy=configured)
        return results

    def _start_vllm(self, stack, policy: str, o: dict) -> list[str]:  # noqa: ANN001
        """``--replicas`` vLLM servers running ``policy`` (ours: the plug-in); the worker is pointed at them."""
        model = o["model"] or stack.env.get("INFERENCE_MODEL", settings.TRIAGE["INFERENCE_MODEL"])
        urls = stack.start_vllm(model, replicas=o["replicas"], policy=policy, max_num_seqs=o["max_num_seqs"],
                                max_num_batched_tokens=o["max_num_batched_tokens"],
                                served_name=settings.TRIAGE["VLLM_MODEL"],
                                max_model_len=settings.TRIAGE["VLLM_MAX_MODEL_LEN"])
        stack.env = dict(stack.env, INFERENCE_BACKEND="vllm", VLLM_URLS=",".join(urls),
                         VLLM_EVENTS=",".join(stack.vllm_events),
                         VLLM_MAX_NUM_SEQS=str(o["max_num_seqs"]))
        return urls

    def _replay(self, base: str, token: str, trace, timeout_s: float, until: str = "final",  # noqa: ANN001
                prefix: str = "lt") -> list[int]:
        """Post ``trace`` on its offsets; wait until every call is done (``until="final"``) or past triage."""
        from triage.models import FINAL_STATUSES, Call, CallStatus

        stamp = uuid.uuid4().hex[:8]
        started = time.monotonic()
        ids: list[int] = []
        lock = threading.Lock()

        def post(item: tuple[int, tuple[float, dict]]) -> None:
            i, (offset, record) = item
            delay = started + offset - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            body = {
                "external_id": f"{prefix}-{stamp}-{i}", "transcript": record["transcript"],
                "received_at": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
                **{k: record[k] for k in LOCATION_FIELDS if record.get(k) not in (None, "")},
            }
            req = urlrequest.Request(
                f"{base}/api/v1/calls/", data=json.dumps(body).encode(), method="POST",
                headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
            )
            with urlrequest.urlopen(req, timeout=30) as resp:
                call_id = json.loads(resp.read())["id"]
            with lock:
                ids.append(call_id)

        with ThreadPoolExecutor(max_workers=16) as pool:
            list(pool.map(post, enumerate(trace)))
        deadline = time.monotonic() + timeout_s
        waiting = (Call.objects.filter(pk__in=ids, status__in=FINAL_STATUSES) if until == "final"
                   else Call.objects.filter(pk__in=ids).exclude(status=CallStatus.RECEIVED))
        while time.monotonic() < deadline:
            if waiting.count() == len(ids):
                break
            time.sleep(0.2 if until != "final" else 1.0)
        return ids

    def _print(self, r: dict) -> None:
        w = self.stdout.write
        w(f"\n== {r['policy']}: {r['completed']}/{r['calls']} done, {r['throughput_tokens_per_s']} tok/s "
          f"({r['throughput_calls_per_s']} calls/s), "
          f"preemptions {r['preemptions']}")
        w("ESI  count  TTFT p50   TTFT p99   E2E p50    E2E p99    norm wait  triage p50 engine p50 TTFT att TPOT att")
        for level, s in r["by_esi"].items():
            w(f"{level:>3}  {s['count']:>5}  {_f(s['ttft_p50'])}  {_f(s['ttft_p99'])}  {_f(s['e2e_p50'])}  "
              f"{_f(s['e2e_p99'])}  {_f(s['normalized_wait_mean'])}  {_f(s['triage_p50'])}  "
              f"{_f(s['queued_to_first_token_p50'])} {_f(s['ttft_attainment'])} {_f(s['tpot_attainment'])}")
        w(f"LLM work: {r['generated']} calls generated ({r['output_tokens']} tokens), {r['guidance_shared']} took a "
          f"linked call's guidance")
        if r.get("links"):
            w(f"incidents formed vs the trace's (pairs): {json.dumps(r['links'])}")
        if r.get("surge_modes"):
            w(f"surge mode changes: {r['surge_modes']}")
        if "vs_fcfs" in r:
            w(f"vs FCFS: {json.dumps(r['vs_fcfs'])}")


def incident_link_quality(call_ids: list[int], trace: list[tuple[float, dict]]) -> dict:
    """Pairwise precision and recall of the incidents the stack formed against the trace's, and the LLM work:
    how many calls generated guidance and how many took another's."""
    from triage.models import Call

    truth, formed = {}, {}
    for call in Call.objects.filter(pk__in=call_ids).only("external_id", "incident_id"):
        index = int(call.external_id.rsplit("-", 1)[1])
        truth[call.pk], formed[call.pk] = trace[index][1].get("incident"), call.incident_id
    pairs = [(a, b) for a in truth for b in truth if a < b]
    true_pairs = {(a, b) for a, b in pairs if truth[a] is not None and truth[a] == truth[b]}
    formed_pairs = {(a, b) for a, b in pairs if formed[a] is not None and formed[a] == formed[b]}
    hits = len(true_pairs & formed_pairs)
    return {"pairs_true": len(true_pairs), "pairs_formed": len(formed_pairs),
            "precision": round(hits / len(formed_pairs), 3) if formed_pairs else None,
            "recall": round(hits / len(true_pairs), 3) if true_pairs else None}


def _close_for_the_next_run(call_ids: list[int]) -> None:
    """The harness ends its calls (no dispatcher will): the next run's identical calls must not link to them."""
    from django.utils import timezone

    from triage.models import Call

    Call.objects.filter(pk__in=call_ids).update(closed_at=timezone.now(), outcome="load test run ended")


def _vllm_preemptions(urls: list[str]) -> int:
    """Preemptions the servers made in this run (they start fresh for each policy)."""
    from inference.backends.vllm_replica import server_metric

    return int(sum(server_metric(url, "vllm:num_preemptions_total") for url in urls))


def _delete_keys(pattern: str, *keys: str) -> None:
    """Delete the keys matching ``pattern`` (this run's inference streams) and ``keys``."""
    from triage.redis_clients import redis_text_client

    client = redis_text_client()
    for key in client.scan_iter(match=pattern, count=100):
        client.delete(key)
    client.delete(*keys)


def _wait_for_engine(since: float, timeout_s: float) -> None:
    """Until an inference worker started after `since` publishes its metrics (it has loaded its model)."""
    from triage.redis_clients import ENGINE_METRICS_KEY, redis_text_client

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        updated = redis_text_client().hget(ENGINE_METRICS_KEY, "updated_at")
        if updated is not None and float(updated) > since:
            return
        time.sleep(0.5)
    raise CommandError(f"the inference worker did not come up within {timeout_s:.0f} s (see var/logs/loadtest/)")


def _f(x: float | None) -> str:
    return f"{x:9.3f}" if x is not None else "        -"


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
