"""The inference worker's metrics: computed on the engine loop's thread (the only one that may read the engine's
structures), published to the board's Redis hash, and served as Prometheus text from a snapshot."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import redis

from inference.engine import Engine
from inference.guidance.follow import GuidanceFollower
from triage import realtime

log = logging.getLogger("triage.inference_worker")
PREEMPTION_LABELS = ("swap", "drop", "partial", "paused")
TOKENS_PER_S_WINDOW_S = 5.0


class WorkerMetrics:
    def __init__(self, engine: Engine, stats: Counter[str], guidance: GuidanceFollower) -> None:
        self.engine, self.stats, self.guidance = engine, stats, guidance
        self._started_at = time.time()
        self._tokens_window: list[tuple[float, int]] = []
        self._last_published = 0.0
        self._http: ThreadingHTTPServer | None = None
        self.snapshot = self.compute()  # what the HTTP endpoint serves; the engine loop refreshes it

    def observe(self, tokens: int) -> None:
        """One engine iteration produced ``tokens`` tokens."""
        self._tokens_window.append((time.time(), tokens))

    def compute(self) -> dict:
        now = time.time()
        self._tokens_window = [(t, n) for t, n in self._tokens_window if now - t <= TOKENS_PER_S_WINDOW_S]
        span = max(1e-6, min(TOKENS_PER_S_WINDOW_S, now - self._started_at))
        kv = self.engine.scheduler.kv_usage()
        used, capacity = kv.used_blocks, kv.capacity_blocks or 1
        running = set(self.engine.runner.batch_ids)
        depth: Counter[int] = Counter()
        for seq in list(self.engine.sequences.values()):
            if seq.request.id not in running:
                depth[seq.request.level] += 1
        preemptions = {m: self.stats.get(f"preemptions_{m}", 0) for m in PREEMPTION_LABELS}
        return {
            "tokens_per_s": round(sum(n for _, n in self._tokens_window) / span, 1),
            "running": len(running),
            "waiting": sum(depth.values()),
            "queue_depth_by_esi": {str(level): depth.get(level, 0) for level in range(1, 6)},
            "kv_used_blocks": used,
            "kv_capacity_blocks": capacity,
            "kv_use": round(used / capacity, 4),
            "kv_tokens_device": self.engine.kv_tokens_on_device(),
            "kv_tokens_host": self.engine.store.host_tokens(),
            "preemptions": preemptions,
            "preemptions_total": sum(preemptions.values()),
            "tokens_total": self.stats["tokens"],
            "off_protocol_sentences_total": self.guidance.off_protocol_total,
            "iterations_total": self.stats["iterations"],
            "updated_at": round(now, 3),
        }

    def publish(self, client: redis.Redis, *, every_s: float, force: bool = False) -> None:
        """Refresh the snapshot and the board's hash, at most every ``every_s`` unless forced."""
        now = time.monotonic()
        if not force and now - self._last_published < every_s:
            return
        self._last_published = now
        self.snapshot = self.compute()
        fields = {k: v for k, v in self.snapshot.items() if not isinstance(v, dict)}
        try:
            client.hset(realtime.ENGINE_METRICS_KEY, mapping=fields)
        except redis.RedisError:
            log.debug("engine metrics not published", exc_info=True)

    def prometheus_text(self) -> str:
        """The engine loop's latest metrics (the HTTP thread never reads the engine itself)."""
        m = self.snapshot
        lines = [
            "# TYPE triage_inference_queue_depth gauge",
            *(f'triage_inference_queue_depth{{esi="{k}"}} {v}' for k, v in m["queue_depth_by_esi"].items()),
            "# TYPE triage_inference_preemptions_total counter",
            *(f'triage_inference_preemptions_total{{mode="{k}"}} {v}' for k, v in m["preemptions"].items()),
            "# TYPE triage_inference_tokens_per_second gauge", f"triage_inference_tokens_per_second {m['tokens_per_s']}",
            "# TYPE triage_inference_tokens_total counter", f"triage_inference_tokens_total {m['tokens_total']}",
            "# TYPE triage_inference_off_protocol_sentences_total counter",
            f"triage_inference_off_protocol_sentences_total {m['off_protocol_sentences_total']}",
            "# TYPE triage_inference_running gauge", f"triage_inference_running {m['running']}",
            "# TYPE triage_inference_kv_use_ratio gauge", f"triage_inference_kv_use_ratio {m['kv_use']}",
            "# TYPE triage_inference_kv_tokens gauge",
            f'triage_inference_kv_tokens{{where="device"}} {m["kv_tokens_device"]}',
            f'triage_inference_kv_tokens{{where="host"}} {m["kv_tokens_host"]}',
        ]
        return "\n".join(lines) + "\n"

    def serve(self, port: int) -> None:
        metrics = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path.rstrip("/") != "/metrics":
                    self.send_error(404)
                    return
                body = metrics.prometheus_text().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=self._http.serve_forever, name="inference-metrics", daemon=True).start()
        log.info("metrics on http://127.0.0.1:%d/metrics", self._http.server_address[1])

    def stop(self) -> None:
        if self._http is not None:
            self._http.shutdown()
