"""Per-client rate limit (ScopedRateThrottle's idea, keyed on the ApiClient) as a fixed-window counter in Redis.

DRF's SimpleRateThrottle keeps a list of timestamps per key and rewrites it on every request — at thousands
of requests a minute that list is the cost. INCR + EXPIRE is one round trip and O(1). A fixed window admits
up to twice the rate across a window boundary; that is fine for an intake guard.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import redis
from rest_framework.request import Request
from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle

from triage.models import ApiClient
from triage.redis_clients import redis_bytes_client

logger = logging.getLogger(__name__)

PERIOD_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_rate(rate: str) -> tuple[int, int]:
    """"600/min" → (600, 60)."""
    count, _, period = rate.partition("/")
    return int(count), PERIOD_SECONDS[period[0]]


class ApiClientRateThrottle(BaseThrottle):
    scope = "intake"

    def __init__(self) -> None:
        self._wait_s: float | None = None

    def rate_for(self, client: ApiClient) -> str:
        return client.throttle_rate or api_settings.DEFAULT_THROTTLE_RATES[self.scope]

    def allow_request(self, request: Request, view: Any) -> bool:
        client = request.auth
        if not isinstance(client, ApiClient):
            return True  # users are not throttled here
        limit, period_s = parse_rate(self.rate_for(client))
        now = time.time()
        key = f"triage:throttle:{self.scope}:{client.pk}:{int(now // period_s)}"
        try:
            pipe = redis_bytes_client().pipeline(transaction=False)
            pipe.incr(key)
            pipe.expire(key, period_s + 1)
            count = pipe.execute()[0]
        except redis.RedisError:
            logger.warning("throttle store unreachable; admitting the request", exc_info=True)
            return True
        self._wait_s = period_s - (now % period_s)
        return count <= limit

    def wait(self) -> float | None:
        return self._wait_s
