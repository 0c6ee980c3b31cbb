"""Measure the REST intake: wrk POSTs calls to daphne on loopback, PostgreSQL stores them.

    python manage.py loadtest_intake [--duration 20] [--connections 16] [--web-processes 2] [--server gunicorn]

Starts the intake server on one listening socket — ``gunicorn`` (WSGI, ``--web-processes`` sync workers; the
`intake` service of docker-compose.yml) or ``daphne`` (ASGI, ``--web-processes`` processes sharing the socket with
``daphne --fd``; the `web` service, which also serves the board's sockets) — creates an
API client with a throttle far above the offered load, runs ``wrk`` with ``bin/intake-wrk.lua`` (one unique
external id per request) and prints accepted calls/s, p50/p90/p99 latency and the row check: every 201
must be a row in PostgreSQL, and no row may exist without its 201. Without a Celery worker the triage
tasks wait in the broker (that is the point: this measures the intake); they are deleted afterwards.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from triage.models import Call
from triage.redis_clients import redis_bytes_client
from triage.services.clients import api_client_create, api_client_deactivate

WRK_SCRIPT = Path(settings.BASE_DIR) / "bin" / "intake-wrk.lua"


class Command(BaseCommand):
    help = "Load-test POST /api/v1/calls/ against daphne + PostgreSQL with wrk; report calls/s, p50/p99, lost rows."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--duration", type=int, default=20, help="seconds of load")
        parser.add_argument("--connections", type=int, default=16)
        parser.add_argument("--threads", type=int, default=1, help="wrk threads")
        parser.add_argument("--web-processes", type=int, default=2, help="gunicorn workers or daphne processes")
        parser.add_argument("--server", choices=["gunicorn", "daphne"], default="gunicorn")
        parser.add_argument("--warmup", type=int, default=3, help="seconds of load before the measured run")

    def handle(self, *args: Any, **options: Any) -> None:
        if shutil.which("wrk") is None:
            raise CommandError("wrk is not installed (Debian: apt-get install -y wrk)")
        call_command("migrate", verbosity=0)
        issued = api_client_create(
            name=f"loadtest-{int(time.time())}", throttle_rate="10000000/min", actor="system:loadtest"
        )
        listener = _listen()
        if options["server"] == "gunicorn":
            web = [_start_gunicorn(listener, options["web_processes"])]
        else:
            web = [_start_daphne(listener) for _ in range(options["web_processes"])]
        try:
            port = listener.getsockname()[1]
            _wait_ready(port)
            if options["warmup"]:
                _wrk(port, issued.token, "warmup", options["warmup"], options["connections"], options["threads"])
            run = f"run{int(time.time())}"
            web_pids = {pid for p in web for pid in _process_tree(p.pid)}
            cpu_before = {pid: _cpu_s(pid) for pid in [*web_pids, *_postgres_backends()]}
            result = _wrk(port, issued.token, run, options["duration"], options["connections"], options["threads"])
            # backends the pools opened during the run started at 0 CPU seconds
            pids = set(cpu_before) | set(_postgres_backends())
            cpu = {pid: _cpu_s(pid) - cpu_before.get(pid, 0.0) for pid in pids}
            rows = Call.objects.filter(client=issued.client, external_id__startswith=f"{run}-").count()
            self._report(result, rows, options)
            self._report_cpu(result, cpu, web_pids=web_pids)
        finally:
            _stop(web)
            listener.close()
            api_client_deactivate(client=issued.client, actor="system:loadtest")
            redis_bytes_client().delete(settings.CELERY_TASK_DEFAULT_QUEUE)  # the unconsumed triage tasks

    def _report_cpu(self, result: dict[str, float], cpu: dict[int, float], web_pids: set[int]) -> None:
        """CPU time per accepted call, so a run on a shared, busy machine still says what 2 cores can do."""
        calls = max(1.0, result["created"])
        web_ms = sum(v for pid, v in cpu.items() if pid in web_pids) / calls * 1000
        db_ms = sum(v for pid, v in cpu.items() if pid not in web_pids) / calls * 1000
        wrk_ms = result.get("wrk_cpu_s", 0.0) / calls * 1000
        total = web_ms + db_ms + wrk_ms
        self.stdout.write(
            f"CPU per accepted call: web {web_ms:.2f} ms + PostgreSQL backends {db_ms:.2f} ms + wrk {wrk_ms:.2f} ms "
            f"= {total:.2f} ms (Redis not counted) → 2 dedicated cores ≈ {2000 / total:.0f} calls/s"
        )

    def _report(self, result: dict[str, float], rows: int, options: dict[str, Any]) -> None:
        seconds = result["duration_us"] / 1e6
        lost = int(result["created"]) - rows
        self.stdout.write(
            f"{options['server']}, web processes {options['web_processes']}, {options['connections']} connections, "
            f"{seconds:.1f} s, "
            f"{os.cpu_count()} CPUs\n"
            f"accepted {int(result['created'])} calls ({result['created'] / seconds:.0f} calls/s), "
            f"other responses {int(result['other'])}, socket errors "
            f"{int(result['errors_connect'] + result['errors_read'] + result['errors_timeout'])}\n"
            f"latency p50 {result['p50_ms']:.1f} ms, p90 {result['p90_ms']:.1f} ms, p99 {result['p99_ms']:.1f} ms, "
            f"max {result['max_ms']:.1f} ms\n"
            f"rows in PostgreSQL for this run: {rows} (201s without a row: {lost}; rows without a 201: {max(0, -lost)})"
        )


def _cpu_s(pid: int) -> float:
    """user + system CPU seconds of a process (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _postgres_backends() -> list[int]:
    """The server processes serving this database (the web processes' pooled connections)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return [row[0] for row in cursor.fetchall()]


def _listen() -> socket.socket:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1024)
    listener.set_inheritable(True)
    return listener


def _process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (gunicorn's workers)."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return [pid]
    return [pid, *(p for child in children for p in _process_tree(int(child)))]


def _start_gunicorn(listener: socket.socket, workers: int) -> subprocess.Popen:
    fd = listener.fileno()
    # as compose runs the intake: its restricted URLs (config/settings_intake.py)
    env = {**os.environ, "DJANGO_DEBUG": "0", "TRIAGE_LOG_LEVEL": "WARNING",
           "DJANGO_SETTINGS_MODULE": "config.settings_intake"}
    command = [sys.executable, "-m", "gunicorn", "--bind", f"fd://{fd}", "--workers", str(workers),
               "--log-level", "warning", "config.wsgi:application"]
    return subprocess.Popen(command, cwd=settings.BASE_DIR, env=env, pass_fds=(fd,))


def _start_daphne(listener: socket.socket) -> subprocess.Popen:
    fd = listener.fileno()
    env = {**os.environ, "DJANGO_DEBUG": "0", "TRIAGE_LOG_LEVEL": "WARNING", "DATABASE_POOL_MAX": "8"}
    command = [sys.executable, "-m", "daphne", "--fd", str(fd), "-v", "0", "config.asgi:application"]
    return subprocess.Popen(command, cwd=settings.BASE_DIR, env=env, pass_fds=(fd,))


def _stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_ready(port: int, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
                conn.sendall(b"GET /api/schema/ HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
                if conn.recv(12)[8:12] == b" 200":
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise CommandError("the intake server did not answer")


def _wrk(port: int, token: str, run: str, duration: int, connections: int, threads: int) -> dict[str, float]:
    env = {**os.environ, "TRIAGE_LOADTEST_TOKEN": token, "TRIAGE_LOADTEST_RUN": run}
    command = [
        "wrk", f"-t{threads}", f"-c{connections}", f"-d{duration}s", "--timeout", "10s", "-s", str(WRK_SCRIPT),
        f"http://127.0.0.1:{port}",
    ]
    started = resource.getrusage(resource.RUSAGE_CHILDREN)
    output = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    finished = resource.getrusage(resource.RUSAGE_CHILDREN)
    wrk_cpu_s = (finished.ru_utime + finished.ru_stime) - (started.ru_utime + started.ru_stime)
    values = dict(re.findall(r"(\w+)=([\d.]+)", " ".join(line for line in output.splitlines() if line.startswith("LOADTEST"))))
    if "created" not in values:
        raise CommandError(f"unexpected wrk output:\n{output}")
    return {**{key: float(value) for key, value in values.items()}, "wrk_cpu_s": wrk_cpu_s}
