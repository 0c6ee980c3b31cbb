"""Putting calls back in the inference stream: all of them from PostgreSQL when Redis has lost the stream,
one when it is generated again (a retry of a failed call, a protocol switch of a finished one).

The database is the source of truth: a call whose status says it is in the stream (``queued`` or being
generated) is put back when Redis comes back empty (restarted without persistence, flushed), by the periodic
sweep and by an inference worker that finds its consumer group gone. An entry for a call that already has
one is harmless: the worker admits a call once and acknowledges every entry that names it when it is done,
and an entry of a finished call is acknowledged unread.
"""

from __future__ import annotations

import logging
import time
from functools import partial

import redis
from django.db import transaction

from triage.models import IN_STREAM_STATUSES, Call, CallStatus
from triage.realtime import publish_guidance_restart
from triage.streams import stream_append_many, stream_lost, stream_mark_complete

from .assessments import inference_entry
from .audit import Actor
from .calls import call_transition
from .errors import Conflict, Unavailable

logger = logging.getLogger(__name__)

BATCH = 500


def calls_restream_if_lost(*, stream: str | None = None) -> int:
    """If the stream was lost, append an entry for every call in ``IN_STREAM_STATUSES``, oldest first, and
    mark the stream complete; returns how many calls were put back. The mark is written last, so a failure
    part-way leaves the whole rebuild to the next attempt. Raises ``redis.RedisError`` while Redis is away.
    O(calls in flight) database rows and stream entries, once per loss."""
    if not stream_lost(stream):
        return 0
    # calls following a linked call's guidance have no entry of their own (services/incidents.py)
    ids = list(Call.objects.filter(status__in=IN_STREAM_STATUSES, guidance_source__isnull=True)
               .order_by("created_at").values_list("pk", flat=True))
    now = time.time()
    for start in range(0, len(ids), BATCH):
        chunk = ids[start : start + BATCH]
        calls = Call.objects.select_related("tier", "assessment").filter(pk__in=chunk).order_by("created_at")
        stream_append_many([inference_entry(call, enqueued_at=now) for call in calls], stream=stream)
    stream_mark_complete(stream)
    if ids:
        logger.warning("the inference stream was lost (Redis restarted empty?): %d calls put back from the database",
                       len(ids))
    return len(ids)


def call_requeue(*, call: Call, actor: Actor, reason: str) -> None:
    """``done`` or ``failed`` → ``queued`` with a new stream entry (the worker acknowledged the old one), in the
    caller's transaction with the call locked; the entry is appended last, so Redis refusing it (``Unavailable``)
    rolls the whole change back. Once committed, the call's replay log is restarted: the worker numbers the new
    generation's tokens from 0 again, and a stream opened later must not show the old text with the new."""
    call_transition(call=call, to_status=CallStatus.QUEUED, actor=actor, data={"reason": reason},
                    updates={"done_at": None, "guidance": "", "off_protocol_sentences": 0, "guidance_brief": False,
                             "failure_reason": ""})
    transaction.on_commit(partial(publish_guidance_restart, call.pk))
    try:
        stream_append_many([inference_entry(call, enqueued_at=time.time())])
    except redis.RedisError as error:
        raise Unavailable(f"the inference stream is unreachable; nothing was changed ({reason})") from error


def call_retry(*, call: Call, actor: Actor) -> Call:
    """Retry a ``failed`` call (a dispatcher on the board, the posting client through the API: the entry points
    check who may): it is generated again at its level and arrival, so it keeps its place in the queue. A call
    that failed before it was triaged (the classifier could not take its transcript) would fail the same way:
    refused with that reason."""
    with transaction.atomic():
        locked = Call.objects.select_for_update(of=("self",)).select_related("tier", "assessment").get(pk=call.pk)
        if locked.status != CallStatus.FAILED:
            raise Conflict(f"only a failed call can be retried; this one is {locked.status}",
                           fields={"status": [f"call is {locked.status}"]})
        if not hasattr(locked, "assessment"):
            raise Conflict("the call failed before triage; its transcript cannot be classified",
                           fields={"status": ["failed before triage"]})
        call_requeue(call=locked, actor=actor, reason="retried")
    return locked


def sweep_mark_done() -> None:
    """Stamp the end of a recovery sweep (``SWEEP_LAST_AT_KEY``): beat's liveness (it scheduled the sweep and a
    worker ran it), read by beat's healthcheck (``manage.py sweep_alive``) and reported on /readyz."""
    from triage.redis_clients import SWEEP_LAST_AT_KEY, redis_text_client

    redis_text_client().set(SWEEP_LAST_AT_KEY, f"{time.time():.3f}")


def sweep_age_s() -> float | None:
    """Seconds since the last recovery sweep ended (None: none recorded)."""
    from triage.redis_clients import SWEEP_LAST_AT_KEY, redis_text_client

    last = redis_text_client().get(SWEEP_LAST_AT_KEY)
    return None if last is None else round(time.time() - float(last), 1)
