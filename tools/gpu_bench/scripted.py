"""A scripted scheduler: runs every active request each iteration, and at the iterations the script names
preempts the named requests in the named mode. It keeps the Request fields exactly as the contract in
scheduler/request.py says, so the engine cannot tell it from a real policy: the exactness measurement of the
GPU bench and the engine's tests drive preemptions with it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from scheduler.config import SchedulerConfig
from scheduler.cost import CostModel
from scheduler.decision import Decision, KVUsage, Preemption, PreemptionMode, Scheduler
from scheduler.request import Request, Stage

# iteration -> [(request id, mode, kept tokens; None = all for SWAP, 0 for DROP)]
Script = dict[int, list[tuple[str, PreemptionMode, int | None]]]


class ScriptedScheduler:
    name = "scripted"

    def __init__(
        self, script: Script | None = None, *, batch_size: int = 8, hold_out: int = 2, reorder_seed: int | None = None
    ):
        """``reorder_seed``: list the batch in a new random order every iteration (as a policy re-ranking it)."""
        import random

        self.reorder = random.Random(reorder_seed) if reorder_seed is not None else None
        self.script = script or {}
        self.batch_size = batch_size
        self.hold_out = hold_out
        self.iteration = 0
        self.arrivals: list[Request] = []
        self.active: list[Request] = []
        self.held_until: dict[str, int] = {}
        self._cancel: list[str] = []

    def submit(self, request: Request) -> None:
        self.arrivals.append(request)

    def schedule(self, now_s: float) -> Decision:
        self.iteration += 1
        self.active.extend(self.arrivals)
        self.arrivals = []
        decision = Decision(stage=None)
        for rid in self._cancel:
            for r in [r for r in self.active if r.id == rid]:
                r.stage = Stage.CANCELLED
                self.active.remove(r)
                decision.cancelled.append(r)
        self._cancel = []
        for rid, mode, kept in self.script.get(self.iteration, []):
            r = next(r for r in self.active if r.id == rid)
            tokens = r.kv_tokens_on_device
            kept = tokens if mode is PreemptionMode.SWAP else 0 if mode is PreemptionMode.DROP else min(kept, tokens)
            r.kv_tokens_on_device, r.kv_tokens_on_host = 0, kept
            r.stage = Stage.PREEMPTED_SWAPPED if kept else Stage.PREEMPTED_DROPPED
            r.preemptions += 1
            decision.preemptions.append(Preemption(r, mode, kept))
            self.held_until[rid] = self.iteration + self.hold_out
        batch = [r for r in self.active if self.held_until.get(r.id, 0) < self.iteration][: self.batch_size]
        if self.reorder is not None:
            self.reorder.shuffle(batch)
        if batch:
            decision.stage = Stage.PREFILL if any(r.needs_prefill for r in batch) else Stage.DECODE
            decision.batch = batch
        return decision

    def complete_iteration(self, now_s: float, decision: Decision, finished_ids: Iterable[str],
                           emitted: Mapping[str, int] | None = None) -> None:
        finished = set(finished_ids)
        for r in decision.batch:
            n = 1 if emitted is None else emitted.get(r.id, 1)
            r.kv_tokens_on_device = r.context_tokens + n - 1
            r.kv_tokens_on_host = 0
            r.generated_tokens += n
            if r.first_token_s is None:
                r.first_token_s = now_s
            if r.id in finished:
                r.stage = Stage.DONE
                r.finish_s = now_s
                self.active.remove(r)
            else:
                r.stage = Stage.DECODE

    def cancel(self, request_id: str) -> None:
        self._cancel.append(request_id)

    def reprioritise(self, request_id: str, level: int, tier: str | None = None) -> None:
        for r in self.active + self.arrivals:
            if r.id == request_id:
                r.level, r.tier = level, tier

    def has_work(self) -> bool:
        return bool(self.arrivals or self.active or self._cancel)

    def refine_remaining(self, request_id: str, remaining_tokens: float) -> None:
        """A script's order does not depend on predicted lengths."""

    def kv_usage(self) -> KVUsage:
        return KVUsage(used_blocks=0, capacity_blocks=0)  # a script keeps no block accounting

    def update_config(self, config: SchedulerConfig | None = None, *, cost: CostModel | None = None) -> None:
        """A script ignores configuration and cost models."""

    def hand_over(self, successor: Scheduler, now_s: float) -> None:
        raise NotImplementedError("a scripted scheduler cannot hand its requests over")
