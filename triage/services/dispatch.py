"""How an accepted call reaches the Celery triage task, at most one published task per burst.

A task drains every ``received`` call (``batching.call_triage_micro_batch``), so one waiting in the broker stands
for every call committed before it starts: ``send_triage_task`` publishes only when no task waits (a Redis
slot, set NX with a TTL), and a task frees the slot as it starts. The task is published by name, so the
services never import the task module (which imports them).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from celery import current_app as celery_app
from django.conf import settings
from django.db import transaction
from redis import RedisError

from triage.models import FINAL_STATUSES, Call
from triage.redis_clients import redis_bytes_client

logger = logging.getLogger(__name__)
TRIAGE_TASK = "triage.tasks.triage_call"
RETRIAGE_TASK = "triage.tasks.retriage_call"
SHARE_GUIDANCE_TASK = "triage.tasks.share_incident_guidance"


def triage_task_pending_key(queue: str) -> str:
    """The Redis key that marks a triage task waiting, not yet started, on Celery queue ``queue``."""
    return f"triage:triage-task:pending:{queue}"


TRIAGE_TASK_PENDING_KEY = triage_task_pending_key(settings.CELERY_TASK_DEFAULT_QUEUE)


def send_triage_task(call_id: int) -> bool:
    """Hand a call to the Celery triage task; a broker outage is logged, not raised: the sweep re-sends.

    Coalesced: at most one triage task waits in the broker at a time (``TRIAGE_TASK_PENDING_KEY``, set NX
    with a TTL). A task clears the key before it claims calls and then drains every ``received`` call, so a
    call committed while the key was set is claimed by the task that set it: under a burst, one publish
    (~1.5 ms of the web process's CPU) serves many calls. Without Redis the task is sent anyway."""
    if not _claim_task_slot(call_id):
        return True  # a task that has not started yet will claim this call
    if _publish(TRIAGE_TASK, (call_id,), f"triage task for call {call_id} not sent; the sweep will re-send it",
                call_id=call_id):
        return True
    triage_task_slot_release()  # let the next call try to publish
    return False


def _publish(task: str, args: tuple, failed: str, *, call_id: int | None = None) -> bool:
    """Publish ``task`` by name; a broker that is away is logged (``failed``), not raised: the sweep re-sends."""
    try:
        celery_app.send_task(task, args=args)
    except Exception:  # kombu raises several unrelated types when the broker is away
        logger.warning(failed, exc_info=True, extra={"call_id": call_id} if call_id is not None else None)
        return False
    return True


def triage_task_slot_release() -> None:
    """Free the slot: a triage task is about to claim calls, so calls committed from now on need a task of their
    own (or a publish failed, and the next call must try again)."""
    try:
        redis_bytes_client().delete(TRIAGE_TASK_PENDING_KEY)
    except RedisError:
        logger.warning("could not clear %s; it expires by itself", TRIAGE_TASK_PENDING_KEY, exc_info=True)


def _claim_task_slot(call_id: int) -> bool:
    ttl_s = settings.TRIAGE["TRIAGE_TASK_COALESCE_S"]
    if ttl_s <= 0:
        return True
    try:
        return bool(redis_bytes_client().set(TRIAGE_TASK_PENDING_KEY, call_id, nx=True, px=int(ttl_s * 1000)))
    except RedisError:
        return True  # the publish will tell whether the broker (the same Redis) is really away


def send_retriage_task(call_id: int) -> bool:
    """Have the triage queue read a call again after new narrative (``retriage.call_retriage``). Not coalesced:
    each task reads the whole narrative and a stale one stops at once. A broker outage is logged; the sweep
    re-sends calls whose assessment read an older narrative."""
    return _publish(RETRIAGE_TASK, (call_id,), f"re-triage task for call {call_id} not sent; the sweep will re-send it",
                    call_id=call_id)


def share_guidance_on_commit(calls: Iterable[Call]) -> None:
    """Inside a transaction that may end ``calls``: once it commits, the calls following the guidance of those
    that ended (linked calls, ``incidents.incident_guidance_settle``) take it or generate their own."""
    ended = [c.pk for c in calls if c.incident_id is not None and c.status in FINAL_STATUSES]
    if ended:
        transaction.on_commit(lambda: send_share_guidance_task(ended))


def send_share_guidance_task(source_ids: list[int]) -> bool:
    """Have the calls sharing the guidance of ``source_ids`` (calls that just ended) take it, or generate their
    own (``incidents.incident_guidance_settle``). A broker outage is logged; the sweep settles them later."""
    return _publish(SHARE_GUIDANCE_TASK, (source_ids,),
                    f"guidance-sharing task for calls {source_ids} not sent; the sweep will settle them")
