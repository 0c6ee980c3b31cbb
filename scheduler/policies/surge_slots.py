"""A surge's extra batch slots (``SchedulerConfig.surge_extra_slots``, opened by ``scheduler.slo``): past the
administrator's batch, for requests of a protected level only, so a burst's ESI-1 and ESI-2 calls get their first
tokens sooner while the lower tiers keep the batch they had."""

from __future__ import annotations

import bisect

from scheduler.config import PROTECTED_LEVELS
from scheduler.policies.schedule_queue import ScheduleEntry, ScheduleQueue


def take_surge_slots(selected: list[ScheduleEntry], dropped: list[ScheduleEntry], queue: ScheduleQueue, extra: int
                     ) -> list[ScheduleEntry]:
    """Give up to ``extra`` slots to the best protected-level entries left out (keys start with the effective
    level): those just dropped first, then the queue's. Inserts into ``selected`` (kept sorted); returns what
    stays dropped. O(extra log n)."""
    protected = max(PROTECTED_LEVELS)
    still_dropped = []
    for e in sorted(dropped):
        if extra and e.key[0] <= protected:
            bisect.insort(selected, e)
            extra -= 1
        else:
            still_dropped.append(e)
    while extra and (top := queue.peek()) is not None and top.key[0] <= protected:
        bisect.insort(selected, queue.pop())
        extra -= 1
    return still_dropped
