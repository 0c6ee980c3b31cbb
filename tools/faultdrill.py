"""Fault drills: a burst of calls through the real stack, one fault injected mid-burst, and the count of what
came out (`manage.py faultdrill`).

Each drill runs web, Celery, beat and the inference worker as children (``tools.stack``) against the database
in DATABASE_URL and a Redis of its own (a ``redis-server`` without persistence, so a restart comes back empty),
supervised as `manage.py demo` supervises them: a child that dies is started again. It posts the calls as a
call system would (retrying a refused POST; the API is idempotent on ``external_id``), injects the fault once
half of them are accepted, and waits until every accepted call is final. It reports calls lost (accepted but not
``done``), duplicated (stored more than once, or guidance stored twice), refused POSTs, and recovery: from the
fault to the first call done after it, and to the last.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib import error as urlerror
from urllib import request as urlrequest

import psutil
import redis

from tools.stack import Stack, free_port, wait_for_port

TRANSCRIPTS = (
    "My husband collapsed in the kitchen, he is not breathing and I cannot wake him.",
    "My son is choking on a grape, he cannot cough or speak.",
    "There is a lot of blood, my friend cut his arm on a window and it will not stop.",
    "My mother's face is drooping and her speech is slurred since ten minutes.",
    "I fell off a ladder and my wrist is swollen, I can move my fingers.",
    "I have a question about my prescription refill, it runs out tomorrow.",
    "My daughter has a temperature and a sore throat, she is drinking fine.",
    "I have a small cut on my hand, it stopped bleeding.",
)
POSTGRES_OUTAGE_S = 5.0


class PrivateRedis:
    """A ``redis-server`` of the drill's own, without persistence: killed and started again, it is empty."""

    def __init__(self, log_dir: Path) -> None:
        self.port = free_port()
        self.log_dir = log_dir
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_dir / "redis.log", "ab")  # noqa: SIM115 - owned by the child
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        wait_for_port("127.0.0.1", self.port, timeout_s=10)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def restart(self) -> None:
        self.kill()
        self.start()

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_connect_timeout=2, socket_timeout=5)


@dataclass
class Drill:
    """What a fault injector may touch: the stack, the Redis, the database's name and the stream's."""

    stack: Stack
    redis: PrivateRedis
    database: str
    stream: str


def _kill(name: str) -> Callable[[Drill], None]:
    def inject(drill: Drill) -> None:
        os.kill(drill.stack.processes[name].pid, signal.SIGKILL)
    return inject


def _kill_celery_child(drill: Drill) -> None:
    children = psutil.Process(drill.stack.processes["celery"].pid).children()
    if not children:
        raise RuntimeError("the Celery worker has no pool child to kill")
    children[0].kill()


def _restart_redis_with_worker_stopped(drill: Drill) -> None:
    argv, env = drill.stack.commands["inference"]
    drill.stack.stop("inference")
    drill.redis.restart()
    time.sleep(5.0)  # calls keep arriving while no worker runs
    drill.stack.start("inference", argv, env)


def _restart_postgres(drill: Drill) -> None:
    """What the application sees of a PostgreSQL restart: every connection is cut, and new ones are refused for
    a few seconds (the drill does not own the server, so it does not stop its process)."""
    import psycopg
    from django.conf import settings

    s = settings.DATABASES["default"]
    admin = psycopg.connect(host=s["HOST"] or "127.0.0.1", port=s["PORT"] or 5432, user=s["USER"],
                            password=s["PASSWORD"] or None, dbname="postgres", autocommit=True)
    with admin:
        admin.execute(f'ALTER DATABASE "{drill.database}" ALLOW_CONNECTIONS false')
        try:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                          (drill.database,))
            time.sleep(POSTGRES_OUTAGE_S)
        finally:
            admin.execute(f'ALTER DATABASE "{drill.database}" ALLOW_CONNECTIONS true')


def _malformed_entry(drill: Drill) -> None:
    drill.redis.client().xadd(drill.stream, {"call_id": "not-a-number", "level": "x"})


FAULTS: dict[str, Callable[[Drill], None]] = {
    "celery-main": _kill("celery"),
    "celery-child": _kill_celery_child,
    "beat": _kill("beat"),
    "inference": _kill("inference"),
    "redis-restart": lambda drill: drill.redis.restart(),
    "redis-restart-worker-stopped": _restart_redis_with_worker_stopped,
    "postgres-restart": _restart_postgres,
    "malformed-entry": _malformed_entry,
}


@dataclass
class DrillResult:
    fault: str
    calls: int
    accepted: int = 0
    done: int = 0
    lost: int = 0
    duplicated: int = 0
    refused_posts: int = 0
    recovery_s: float | None = None  # fault -> first call done after it
    drained_s: float | None = None  # fault -> the last call done
    restarts: dict[str, int] = field(default_factory=dict)
    passed: bool = False


@dataclass
class DrillOptions:
    calls: int = 300
    max_new_tokens: int = 64
    model: str | None = None
    timeout_s: float = 900.0
    concurrency: int = 8
    log_dir: Path = Path("var/logs/faultdrill")


def run_drill(fault: str, options: DrillOptions, log: Callable[[str], None] = print) -> DrillResult:
    from django.conf import settings

    run = uuid.uuid4().hex[:8]
    log_dir = options.log_dir / f"{fault}-{run}"
    private = PrivateRedis(log_dir)
    private.start()
    stream = f"triage:drill:{run}"
    env = dict(
        os.environ, REDIS_URL=private.url, TRIAGE_INFERENCE_STREAM=stream, HF_HUB_OFFLINE="1",
        PYTHONUNBUFFERED="1", TRIAGE_CELERY_QUEUE="triage",
        # The sweep runs every 5 s and re-sends calls left 10 s; production's 15 s and 30 s only stretch recovery.
        TRIAGE_SWEEP_INTERVAL_S="5", TRIAGE_SWEEP_STUCK_AFTER_S="10",
    )
    stack = Stack(env=env, log_dir=log_dir)
    drill = Drill(stack, private, settings.DATABASES["default"]["NAME"], stream)
    result = DrillResult(fault, options.calls)
    try:
        port = free_port()
        stack.start_web(port)
        stack.start_celery(beat=True)
        extra = ["--max-new-tokens", str(options.max_new_tokens), "--consumer", f"drill-{run}"]
        stack.start_inference(extra + (["--model", options.model] if options.model else []))
        _wait_for_heartbeat(private, timeout_s=180)
        token = _drill_client(fault, run)
        ids = [f"drill-{run}-{i}" for i in range(options.calls)]
        poster = _Poster(f"http://127.0.0.1:{port}", token, ids, options.concurrency)
        poster.start()
        poster.wait_for(options.calls // 2, timeout_s=options.timeout_s)
        fault_at = time.time()
        log(f"{fault}: injecting after {poster.accepted} accepted calls")
        FAULTS[fault](drill)
        deadline = time.monotonic() + options.timeout_s
        while time.monotonic() < deadline and not _all_final(ids, poster):
            for name in stack.restart_dead():
                log(f"{fault}: {name} exited; started again")
            time.sleep(0.5)
        poster.join()
        _count(result, ids, poster, fault_at)
        result.restarts = dict(stack.restarts)
    finally:
        stack.stop_all()
        private.kill()
    return result


def _wait_for_heartbeat(private: PrivateRedis, timeout_s: float) -> None:
    from triage.redis_clients import ENGINE_METRICS_KEY

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if private.client().hget(ENGINE_METRICS_KEY, "updated_at"):
                return
        except redis.RedisError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"the inference worker did not come up within {timeout_s:.0f} s")


def _drill_client(fault: str, run: str) -> str:
    from triage.services.clients import api_client_create

    return api_client_create(name=f"faultdrill-{fault}-{run}").token


class _Poster(threading.Thread):
    """Posts every call, as a call system does: a refused or failed POST is sent again until accepted."""

    def __init__(self, base: str, token: str, external_ids: list[str], concurrency: int) -> None:
        super().__init__(daemon=True)
        self.base, self.token, self.ids, self.concurrency = base, token, external_ids, concurrency
        self.accepted_ids: set[str] = set()
        self.refused = 0
        self._lock = threading.Lock()

    @property
    def accepted(self) -> int:
        with self._lock:
            return len(self.accepted_ids)

    def run(self) -> None:
        with ThreadPoolExecutor(self.concurrency) as pool:
            list(pool.map(self._post, enumerate(self.ids)))

    def _post(self, item: tuple[int, str]) -> None:
        i, external_id = item
        body = json.dumps({"external_id": external_id, "transcript": TRANSCRIPTS[i % len(TRANSCRIPTS)],
                           "received_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}).encode()
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            req = urlrequest.Request(f"{self.base}/api/v1/calls/", data=body, method="POST", headers={
                "Authorization": f"Bearer {self.token}", "Content-Type": "application/json"})
            try:
                with urlrequest.urlopen(req, timeout=30) as response:
                    if response.status in (200, 201):
                        with self._lock:
                            self.accepted_ids.add(external_id)
                        return
            except (urlerror.URLError, OSError):
                pass
            with self._lock:
                self.refused += 1
            time.sleep(0.5)

    def wait_for(self, n: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while self.accepted < n and time.monotonic() < deadline:
            time.sleep(0.05)


def _final_count(ids: list[str]) -> int:
    from django.db import close_old_connections

    from triage.models import FINAL_STATUSES, Call

    close_old_connections()
    return Call.objects.filter(external_id__in=ids, status__in=FINAL_STATUSES).count()


def _all_final(ids: list[str], poster: _Poster) -> bool:
    from django.db import DatabaseError, connection

    if poster.is_alive():
        return False
    try:
        return _final_count(ids) == len(ids)
    except DatabaseError:
        connection.close()  # the outage cut it; the next check opens a new one
        return False


def _count(result: DrillResult, ids: list[str], poster: _Poster, fault_at: float) -> None:
    from django.db import connection
    from django.db.models import Count

    from triage.models import AuditAction, AuditEvent, Call, CallStatus

    connection.close()
    calls = Call.objects.filter(external_id__in=ids)
    result.accepted, result.refused_posts = poster.accepted, poster.refused
    stored = list(calls.values_list("external_id", flat=True))
    result.duplicated = len(stored) - len(set(stored))
    result.duplicated += AuditEvent.objects.filter(call__in=calls, action=AuditAction.CALL_DONE).values("call").annotate(
        n=Count("id")).filter(n__gt=1).count()
    done = sorted(t.timestamp() for t in calls.filter(status=CallStatus.DONE).values_list("done_at", flat=True))
    result.done = len(done)
    result.lost = len(poster.accepted_ids) - result.done
    after = [t - fault_at for t in done if t >= fault_at]
    result.recovery_s = round(after[0], 1) if after else None
    result.drained_s = round(after[-1], 1) if after else None
    result.passed = result.lost == 0 and result.duplicated == 0 and result.accepted == result.calls
