"""A vLLM replica as the worker's pool sees it besides its completions: up or down (``/health``), what its
``/metrics`` count, and the preemption notices our plug-in publishes from inside it
(``scheduler/preemption_notice.py``)."""

from __future__ import annotations

import http.client
import logging
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from scheduler.preemption_notice import PreemptionNotice

log = logging.getLogger("inference.vllm_pool")

STEP_SMOOTHING = 0.05  # weight of each new gap: about the last twenty tokens count


@dataclass
class Replica:
    url: str
    up: bool = True
    checking: bool = False
    # Seconds between a call's tokens on this server (its decode step at its current batch), a moving
    # average over every stream's gaps: what GoRouting turns into start times and token rates. It starts at
    # the default tiers' TPOT target, so an unmeasured server is assumed to just keep up.
    step_s: float = 0.1

    def observe_step(self, seconds_per_token: float) -> None:
        self.step_s += STEP_SMOOTHING * (seconds_per_token - self.step_s)

    @property
    def name(self) -> str:
        return self.url


def server_healthy(url: str, timeout_s: float = 1.0) -> bool:
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout_s)
    try:
        conn.request("GET", f"{parts.path}/health")
        return conn.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def server_metric(url: str, name: str, timeout_s: float = 2.0) -> float:
    """The sum of a counter or gauge over its label sets in a server's Prometheus ``/metrics``."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout_s)
    try:
        conn.request("GET", f"{parts.path}/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name) and not line.startswith("#") and line[len(name)] in "{ ")


def listen_for_preemptions(endpoints: Sequence[str], deliver: Callable[[PreemptionNotice], None]) -> None:
    """Subscribe to every replica's notice endpoint (``tcp://host:port``) and hand each notice to ``deliver``,
    for ever (run it in a daemon thread). ZeroMQ reconnects by itself to a replica that restarts."""
    import zmq

    socket = zmq.Context.instance().socket(zmq.SUB)
    socket.setsockopt(zmq.SUBSCRIBE, b"")
    socket.setsockopt(zmq.LINGER, 0)
    for endpoint in endpoints:
        socket.connect(endpoint)
    while True:
        data = socket.recv()
        try:
            deliver(PreemptionNotice.from_bytes(data))
        except (ValueError, KeyError, TypeError):
            log.warning("a malformed preemption notice was ignored: %r", data[:200])
