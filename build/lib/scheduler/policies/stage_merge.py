"""Stage awareness (Hua et al. Algorithm 3): which candidates may share an iteration with the best request p*.

A decode step and a prefill run as one iteration, so a long prefill in the batch delays every decode in it.
When p* is decoding, less urgent prefills must not delay it: they go back to the queue, and the slots they
leave are offered to further waiting requests that may join. ``StageMerge`` keeps the one piece of state
this needs across decisions, the prefill-time credit of ``config.lower_prefill_share``.
"""

from __future__ import annotations

from collections.abc import Callable

from scheduler.config import SchedulerConfig
from scheduler.cost import CostModel
from scheduler.policies.schedule_queue import ScheduleEntry, ScheduleQueue
from scheduler.request import Request


def decode_ready(r: Request) -> bool:
    """All of the context's KV (but the newest token) is on device: the request can join a decode step. O(1)."""
    return r.kv_tokens_on_host == 0 and r.generated_tokens > 0 and r.context_tokens - r.kv_tokens_on_device <= 1


def prefill_cost_s(r: Request, cost: CostModel) -> float:
    """What ``r`` adds to an iteration as a prefill: reload of its host KV plus its pending tokens; O(1)."""
    cached = r.kv_tokens_on_device + r.kv_tokens_on_host
    return cost.swap_s(r.kv_tokens_on_host) + cost.prefill_s(r.context_tokens - cached, cached)


class StageMerge:
    def __init__(self) -> None:
        self.lower_prefill_credit_s = 0.0

    def hold_back_lower_prefills(
        self, best: ScheduleEntry, candidates: list[ScheduleEntry], dropped: list[ScheduleEntry], *,
        queue: ScheduleQueue, config: SchedulerConfig, cost: CostModel, remaining_s: Callable[[Request], float],
    ) -> list[ScheduleEntry]:
        """Hua et al. Algorithm 3, p* decoding: a less urgent prefill must not delay p*'s decode, so prefill
        candidates go back to the queue (appended to ``dropped``; ``config.stage_merge == "strict"``: p*
        prefilling too, where the paper merges every candidate). Returns the candidates that stay. Three
        refinements:
        - ``config.stage_merge`` ``"level"`` (default) and ``"strict"``: "less urgent" means a worse first key
          component (effective level): prefills of p*'s own level still join; ``"paper"``: every prefill waits.
        - the slots the prefills leave are offered to up to 2x as many further waiting requests that may join
          (paused ones are decode-ready), so the batch does not drain while p* decodes.
        - ``config.lower_prefill_share`` (rho): a less urgent prefill may still take a free slot when the
          prefill-time credit covers its cost. The credit grows by rho x the estimated decode step at every
          such decision and is capped at rho x p*'s predicted remaining time, so less urgent prefills take at
          most a share rho of p*'s decode time: p* finishes at most ~rho later, and at light load (where p* is
          nearly always decoding) arrivals are no longer held back for p*'s whole life. O(b log n)."""
        same_level_joins = config.stage_merge != "paper"
        level = best.key[0]
        share = config.lower_prefill_share

        def may_join(e: ScheduleEntry) -> bool:
            return decode_ready(e.request) or (same_level_joins and e.key[0] <= level)

        keep, lower = [], []
        for e in candidates:
            (keep if may_join(e) else lower).append(e)
        scanned = 0
        b = config.batch_size
        budget = 2 * (b - len(keep))
        while len(keep) < b and scanned < budget:
            if queue.peek() is None:
                break
            e = queue.pop()
            scanned += 1
            (keep if may_join(e) else lower).append(e)
        if share > 0 and lower and len(keep) < b:
            step = cost.decode_step_s(sum(e.request.prompt_tokens + e.request.generated_tokens for e in keep))
            cap = share * remaining_s(best.request)
            credit = self.lower_prefill_credit_s = min(cap, self.lower_prefill_credit_s + share * step)
            lower.sort()
            for i, e in enumerate(lower):
                if len(keep) >= b:
                    dropped.extend(lower[i:])
                    break
                c = prefill_cost_s(e.request, cost)
                if c > credit:
                    dropped.extend(lower[i:])  # best first: a later one does not jump the queue
                    break
                credit -= c
                keep.append(e)
            self.lower_prefill_credit_s = credit
        else:
            dropped.extend(lower)
        return keep
