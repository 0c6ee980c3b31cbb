"""The Redis side of the contracts in docs/architecture.md §2b: the inference stream and the control channel.

Its client is ``triage.redis_clients.redis_bytes_client`` (bytes).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import redis
from django.conf import settings
from django.db import transaction

from triage.contracts import ControlMessage, StreamEntry, control_to_json
from triage.redis_clients import redis_bytes_client

logger = logging.getLogger(__name__)

def inference_stream() -> str:
    return settings.TRIAGE["INFERENCE_STREAM"]


def control_channel() -> str:
    return settings.TRIAGE["CONTROL_CHANNEL"]


def stream_append_many(entries: Sequence[StreamEntry], stream: str | None = None) -> list[str]:
    """XADD each entry to the inference stream (``stream``: another one, for tests) in one round trip; returns
    the entry ids.

    Raises ``redis.RedisError`` when Redis is unreachable: callers decide what that means.
    """
    if not entries:
        return []
    pipe = redis_bytes_client().pipeline(transaction=False)
    for entry in entries:
        pipe.xadd(stream or inference_stream(), entry.to_fields())
    return [i.decode() if isinstance(i, bytes) else str(i) for i in pipe.execute()]


# A key written beside the stream once its entries are known to be complete. Redis restarted without
# persistence (or flushed) comes back without it: that is how the stream's loss is noticed, whatever else
# (new calls, a worker recreating its group) has written to the stream since.
def _stream_marker(stream: str) -> str:
    return f"{stream}:complete"


def stream_lost(stream: str | None = None) -> bool:
    """Whether Redis has lost the stream's entries since they were last made complete."""
    return not redis_bytes_client().exists(_stream_marker(stream or inference_stream()))


def stream_mark_complete(stream: str | None = None) -> None:
    redis_bytes_client().set(_stream_marker(stream or inference_stream()), f"{time.time():.3f}")


def control_publish(message: ControlMessage) -> None:
    """PUBLISH one control message now; a lost message is logged, never raised (pub/sub is at-most-once)."""
    try:
        redis_bytes_client().publish(control_channel(), control_to_json(message))
    except redis.RedisError:
        logger.exception("control message not published: %s", message)


def control_publish_on_commit(message: ControlMessage) -> None:
    """PUBLISH a control message once the current transaction commits (never for a rolled-back change)."""
    transaction.on_commit(lambda: control_publish(message))
