"""The Redis side of the contracts in docs/architecture.md §2b: the inference stream and the control channel.

Its client is ``triage.redis_clients.get_redis`` (bytes).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence

import redis
from django.conf import settings
from django.db import transaction

from triage.redis_clients import get_redis

logger = logging.getLogger(__name__)

StreamFields = Mapping[str, str | int | float]


def inference_stream() -> str:
    return settings.TRIAGE["INFERENCE_STREAM"]


def control_channel() -> str:
    return settings.TRIAGE["CONTROL_CHANNEL"]


def stream_append_many(entries: Sequence[StreamFields], stream: str | None = None) -> list[str]:
    """XADD each entry to the inference stream (``stream``: another one, for tests) in one round trip; returns
    the entry ids.

    Raises ``redis.RedisError`` when Redis is unreachable: callers decide what that means.
    """
    if not entries:
        return []
    pipe = get_redis().pipeline(transaction=False)
    for fields in entries:
        pipe.xadd(stream or inference_stream(), dict(fields))
    return [i.decode() if isinstance(i, bytes) else str(i) for i in pipe.execute()]


# A key written beside the stream once its entries are known to be complete. Redis restarted without
# persistence (or flushed) comes back without it: that is how the stream's loss is noticed, whatever else
# (new calls, a worker recreating its group) has written to the stream since.
def _stream_marker(stream: str) -> str:
    return f"{stream}:complete"


def stream_lost(stream: str | None = None) -> bool:
    """Whether Redis has lost the stream's entries since they were last made complete."""
    return not get_redis().exists(_stream_marker(stream or inference_stream()))


def stream_mark_complete(stream: str | None = None) -> None:
    get_redis().set(_stream_marker(stream or inference_stream()), f"{time.time():.3f}")


def control_publish(message: Mapping) -> None:
    """PUBLISH one control message now; a lost message is logged, never raised (pub/sub is at-most-once)."""
    try:
        get_redis().publish(control_channel(), json.dumps(dict(message)))
    except redis.RedisError:
        logger.exception("control message not published: %s", message)


def control_publish_on_commit(message: Mapping) -> None:
    """PUBLISH a control message once the current transaction commits (never for a rolled-back change)."""
    payload = dict(message)
    transaction.on_commit(lambda: control_publish(payload))
