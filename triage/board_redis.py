"""The Redis the board reads and writes, below both its publisher (``triage.realtime``) and its selectors.

One text-decoding client per process, and the engine-metrics hash: the inference worker writes it (fields in
``triage.realtime``'s contract), the board's metrics panel and the readiness probe read it.
"""

from __future__ import annotations

from functools import lru_cache

import redis
from django.conf import settings

ENGINE_METRICS_KEY = "triage:engine:metrics"
ENGINE_METRICS_STALE_S = 10.0


@lru_cache(maxsize=4)
def _redis_for(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, decode_responses=True, socket_timeout=5)


def redis_client() -> redis.Redis:
    """The process's Redis client (thread-safe connection pool) for the configured REDIS_URL."""
    return _redis_for(settings.REDIS_URL)
