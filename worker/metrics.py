"""The inference worker's metrics: computed on the engine loop's thread (the only one that may read the engine's
structures), published to the board's Redis hash, and exported to Prometheus from that snapshot (a collector
reads the latest snapshot, so a scrape never touches the engine) with per-ESI TTFT and E2E histograms and
PROSERVE's token-level deadline gain (TDG) by ESI. Every series carries the worker's consumer name, so several
workers are told apart."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterator
from wsgiref.simple_server import WSGIServer

import redis
from prometheus_client import CollectorRegistry, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from inference.executor import Executor
from inference.guidance.follow import GuidanceFollower
from scheduler.config import ESI_LEVELS, TierPolicy
from scheduler.decision import PreemptionMode
from scheduler.metrics import TdgAccumulator, count_token
from scheduler.slo import MEASURES, SloWindow, SurgeMode
from triage.redis_clients import ENGINE_METRICS_KEY

log = logging.getLogger("worker")
# How a running call lost its slot: the scheduler's preemption modes, or paused (vLLM's pool, where the server
# keeps or drops the cache itself).
PAUSED = "paused"
PREEMPTION_LABELS = (*(str(mode) for mode in PreemptionMode), PAUSED)
TOKENS_PER_S_WINDOW_S = 5.0


# Seconds: from a few (ESI 1 on a GPU) to the minutes a low-acuity call may wait behind a burst on a CPU.
LATENCY_BUCKETS = (0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800)


class WorkerMetrics:
    def __init__(self, engine: Executor, stats: Counter[str], guidance: GuidanceFollower, worker: str = "") -> None:
        self.engine, self.stats, self.guidance = engine, stats, guidance
        self._started_at = time.time()
        self._tokens_window: list[tuple[float, int]] = []
        self._last_published = 0.0
        self._http: WSGIServer | None = None
        self.slo = SloWindow()  # the SLO monitor's measurements (the surge loop reads them too)
        self.surge_mode = SurgeMode.NORMAL  # set by the surge loop
        self.tdg = {level: TdgAccumulator() for level in ESI_LEVELS}  # token-level deadline gain, by ESI
        self.snapshot = self.compute()  # what a scrape reads; the engine loop refreshes it
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(_SnapshotCollector(self, worker))
        self._ttft = Histogram("triage_inference_ttft_seconds", "API accept to the first guidance token, by ESI",
                               ["esi", "worker"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self._e2e = Histogram("triage_inference_e2e_seconds", "API accept to the complete guidance, by ESI",
                              ["esi", "worker"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self._worker = worker

    def observe(self, tokens: int) -> None:
        """One engine iteration produced ``tokens`` tokens."""
        self._tokens_window.append((time.time(), tokens))

    def compute(self) -> dict:
        now = time.time()
        self._tokens_window = [(t, n) for t, n in self._tokens_window if now - t <= TOKENS_PER_S_WINDOW_S]
        span = max(1e-6, min(TOKENS_PER_S_WINDOW_S, now - self._started_at))
        kv = self.engine.kv_usage()
        used, capacity = kv.used_blocks, kv.capacity_blocks or 1
        running = set(self.engine.running_ids())
        depth: Counter[int] = Counter()
        for seq in list(self.engine.sequences.values()):
            if seq.request.id not in running:
                depth[seq.request.level] += 1
        preemptions = {m: self.stats.get(f"preemptions_{m}", 0) for m in PREEMPTION_LABELS}
        config = self.engine.current_config()
        attainment = self.slo.attainment(time.time(), {level: config.tier_for(None, level) for level in ESI_LEVELS})
        return {
            "surge_protect": int(self.surge_mode is SurgeMode.PROTECT),
            "slo_attainment": {(str(level), measure): a.share[measure] for level, a in attainment.items()
                               for measure in MEASURES if a.share[measure] is not None},
            "tokens_per_s": round(sum(n for _, n in self._tokens_window) / span, 1),
            "running": len(running),
            "waiting": sum(depth.values()),
            "queue_depth_by_esi": {str(level): depth.get(level, 0) for level in ESI_LEVELS},
            "kv_used_blocks": used,
            "kv_capacity_blocks": capacity,
            "kv_use": round(used / capacity, 4),
            "kv_tokens_device": self.engine.kv_tokens_on_device(),
            "kv_tokens_host": self.engine.kv_tokens_on_host(),
            "preemptions": preemptions,
            "preemptions_total": sum(preemptions.values()),
            "tokens_total": self.stats["tokens"],
            "off_protocol_sentences_total": self.guidance.off_protocol_total,
            "iterations_total": self.stats["iterations"],
            "generation_errors_total": self.stats["generation_errors"],
            "brief_guidance_total": self.stats["brief_guidance"],
            "draft_tokens": {outcome: self.stats[f"draft_tokens_{outcome}"] for outcome in ("accepted", "rejected")},
            "tdg_gain": {(str(level), outcome): gain for level, tdg in self.tdg.items()
                         for outcome, gain in (("on_time", tdg.on_time), ("late", tdg.total - tdg.on_time))},
            **({"cost_correction": round(corrector.factor, 4)}
               if (corrector := self.engine.cost_corrector) is not None else {}),
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
            client.hset(ENGINE_METRICS_KEY, mapping=fields)
        except redis.RedisError:
            log.debug("engine metrics not published", exc_info=True)

    def observe_first_token(self, level: int, waited_s: float) -> None:
        """A call's first token: ``waited_s`` since the API accepted it (TTFT, the queue wait included)."""
        self._ttft.labels(esi=str(level), worker=self._worker).observe(max(0.0, waited_s))
        self.slo.first_token(level, waited_s, time.time())

    def observe_token(self, level: int, tier: TierPolicy, *, index: int, t_s: float, arrival_s: float) -> None:
        """A call's token ``index`` (1-based) delivered at ``t_s`` (Unix seconds), the call accepted at
        ``arrival_s``: its deadline gain, by ``tier``'s targets, on time or late (``scheduler.metrics.count_token``,
        the simulator's rule)."""
        count_token(self.tdg.setdefault(level, TdgAccumulator()), tier, index=index, t_s=t_s, arrival_s=arrival_s)

    def observe_done(self, level: int, total_s: float, tpot_s: float | None = None) -> None:
        """A call's guidance is complete: ``total_s`` since the API accepted it (E2E); ``tpot_s`` the mean
        seconds per token after the first (None for a one-token answer)."""
        self._e2e.labels(esi=str(level), worker=self._worker).observe(max(0.0, total_s))
        self.slo.done(level, total_s, tpot_s, time.time())

    def serve(self, port: int, host: str = "127.0.0.1") -> None:
        """Serve /metrics on ``host:port`` (0.0.0.0 for a scraper in another container)."""
        self._http, _ = start_http_server(port, addr=host, registry=self.registry)
        log.info("metrics on http://%s:%d/metrics", host, self._http.server_address[1])

    def stop(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None


class _SnapshotCollector:
    """Prometheus families from the worker's latest snapshot (O(1) per scrape, never reads the engine)."""

    def __init__(self, metrics: WorkerMetrics, worker: str) -> None:
        self._metrics, self._worker = metrics, worker

    def collect(self) -> Iterator[Metric]:
        m, w = self._metrics.snapshot, self._worker

        def gauge(name: str, doc: str, value: float, **labels: str) -> GaugeMetricFamily:
            family = GaugeMetricFamily(name, doc, labels=["worker", *labels])
            family.add_metric([w, *labels.values()], value)
            return family

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            family = CounterMetricFamily(name, doc, labels=["worker"])
            family.add_metric([w], value)
            return family

        depth = GaugeMetricFamily("triage_inference_queue_depth", "Calls waiting in the engine, by ESI",
                                  labels=["worker", "esi"])
        for level, n in m["queue_depth_by_esi"].items():
            depth.add_metric([w, level], n)
        yield depth
        preemptions = CounterMetricFamily("triage_inference_preemptions", "Preemptions, by mode",
                                          labels=["worker", "mode"])
        for mode, n in m["preemptions"].items():
            preemptions.add_metric([w, mode], n)
        yield preemptions
        drafts = CounterMetricFamily("triage_inference_draft_tokens", "Speculative draft tokens of finished calls, "
                                     "by outcome (accepted, rejected)", labels=["worker", "outcome"])
        for outcome, n in m["draft_tokens"].items():
            drafts.add_metric([w, outcome], n)
        yield drafts
        tdg = CounterMetricFamily(
            "triage_inference_tdg_gain", "Token-level deadline gain (PROSERVE) of the tokens generated, by ESI and "
            "outcome (on_time, late); on_time / (on_time + late) is the TDG ratio", labels=["worker", "esi", "outcome"])
        for (level, outcome), gain in m["tdg_gain"].items():
            tdg.add_metric([w, level, outcome], gain)
        yield tdg
        if "cost_correction" in m:
            yield gauge("triage_inference_cost_correction", "The engine's online correction of its cost model: "
                        "momentum average of measured / predicted iteration time", m["cost_correction"])
        kv = GaugeMetricFamily("triage_inference_kv_tokens", "KV-cache tokens held", labels=["worker", "where"])
        kv.add_metric([w, "device"], m["kv_tokens_device"])
        kv.add_metric([w, "host"], m["kv_tokens_host"])
        yield kv
        attainment = GaugeMetricFamily(
            "triage_slo_attainment_ratio", "Share of the last 60 s of calls within their tier's mean target, by ESI "
            "and measure (ttft, tpot, e2e); absent when none was measured", labels=["worker", "esi", "measure"])
        for (level, measure), share in m["slo_attainment"].items():
            attainment.add_metric([w, level, measure], share)
        yield attainment
        yield gauge("triage_surge_protect", "1 while the surge controller protects ESI 1-2 (extra batch slots)",
                    m["surge_protect"])
        yield gauge("triage_inference_running", "Calls in the running batch", m["running"])
        yield gauge("triage_inference_kv_use_ratio", "Share of KV blocks in use", m["kv_use"])
        yield gauge("triage_inference_tokens_per_second", "Tokens generated per second (5 s window)", m["tokens_per_s"])
        yield gauge("triage_inference_heartbeat_timestamp_seconds", "When the engine loop last published",
                    m["updated_at"])
        yield counter("triage_inference_tokens", "Tokens generated", m["tokens_total"])
        yield counter("triage_inference_off_protocol_sentences", "Sentences the stream guard found off protocol",
                      m["off_protocol_sentences_total"])
        yield counter("triage_inference_generation_errors", "Batches' calls the model failed on",
                      m["generation_errors_total"])
        yield counter("triage_inference_brief_guidance", "Calls admitted with key questions only (surge protect mode)",
                      m["brief_guidance_total"])
