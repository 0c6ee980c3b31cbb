"""The process's Redis clients, one module for both, so a caller can see which it holds.

``redis_bytes_client()`` answers bytes: the inference stream and the control channel, whose entry ids and fields the
stream code decodes where it reads them. ``redis_text_client()`` answers text: the board's keys (token replays, the
engine-metrics hash the inference worker writes and the board and the readiness probe read). Each is one
thread-safe connection pool per process, built lazily from ``settings.REDIS_URL``.
"""

from __future__ import annotations

from functools import lru_cache

import redis
from django.conf import settings

ENGINE_METRICS_KEY = "triage:engine:metrics"
ENGINE_METRICS_STALE_S = 10.0
SWEEP_LAST_AT_KEY = "triage:sweep:last_at"  # when the recovery sweep last ran to its end (epoch seconds, text)


@lru_cache(maxsize=4)
def _bytes_client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=5, health_check_interval=30)


@lru_cache(maxsize=4)
def _text_client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, decode_responses=True, socket_timeout=5)


def redis_bytes_client() -> redis.Redis:
    """The bytes client for ``settings.REDIS_URL`` (the stream and the control channel)."""
    return _bytes_client(settings.REDIS_URL)


def redis_text_client() -> redis.Redis:
    """The text client for ``settings.REDIS_URL`` (the board's keys)."""
    return _text_client(settings.REDIS_URL)
