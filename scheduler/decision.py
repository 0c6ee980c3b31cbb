"""What a scheduler tells its executor at each iteration boundary, and the interface every policy shares.

The executor loop (simulator and live engine alike):

    decision = scheduler.schedule(now_s)
    for p in decision.preemptions: carry out p   # swap KV to host / drop it / keep a prefix on host
    for r in decision.cancelled:   free r's KV
    run decision.batch in decision.stage          # PREFILL: swap in host KV, compute pending tokens, emit one
                                                  # DECODE: emit one token per request
    scheduler.complete_iteration(now_s, decision, finished_ids)  # ids that emitted EOS / hit their limit

The scheduler owns every Request field (stage, generated_tokens, kv_tokens_*); executors only read them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

from scheduler.request import Request, Stage

if TYPE_CHECKING:
    from scheduler.config import SchedulerConfig
    from scheduler.cost import CostModel


class PreemptionMode(StrEnum):
    SWAP = "swap"  # the whole cache moves to host memory; resuming swaps it back in
    DROP = "drop"  # the cache is discarded; resuming recomputes it with a prefill
    PARTIAL = "partial"  # a prefix of kept_tokens stays (on host); the rest is dropped and recomputed


@dataclass(frozen=True)
class Preemption:
    request: Request
    mode: PreemptionMode
    kept_tokens: int  # KV tokens kept on host: all of them for SWAP, 0 for DROP, a prefix for PARTIAL


@dataclass
class Decision:
    stage: Stage | None  # Stage.PREFILL, Stage.DECODE, or None when there is nothing to run
    batch: list[Request] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    cancelled: list[Request] = field(default_factory=list)
    # Requests taken out of the running batch whose KV stays where it is (on device): nothing to carry out;
    # listed so the executor can publish the `preempted` state.
    paused: list[Request] = field(default_factory=list)

    @property
    def is_idle(self) -> bool:
        return not self.batch


@dataclass(frozen=True)
class KVUsage:
    """The scheduler's KV block accounting, as the worker's metrics report it."""

    used_blocks: int
    capacity_blocks: int


class Scheduler(Protocol):
    """The one interface the simulator and the live engine drive."""

    name: str

    def submit(self, request: Request) -> None:
        """Add an arrival to the unsorted arrival buffer: O(1), safe to call from another thread."""

    def schedule(self, now_s: float) -> Decision:
        """Choose the next batch, its stage, and the preemptions to carry out first."""

    def complete_iteration(self, now_s: float, decision: Decision, finished_ids: Iterable[str],
                           emitted: Mapping[str, int] | None = None) -> None:
        """Account the tokens the batch emitted (one each, or ``emitted[id]`` under speculative decoding);
        requests in finished_ids are done and free their KV."""

    def cancel(self, request_id: str) -> None:
        """Cancel a waiting or running request; its KV is freed via the next decision's `cancelled`."""

    def reprioritise(self, request_id: str, level: int, tier: str | None = None) -> None:
        """Change a request's level (a dispatcher override) and tier (None: the new level's); takes effect at
        the next decision."""

    def has_work(self) -> bool:
        """True while any request is waiting, running or preempted."""

    def refine_remaining(self, request_id: str, remaining_tokens: float) -> None:
        """A refined prediction of the tokens ``request_id`` has still to generate (TRAIL's length probe); a
        policy that does not order by remaining length may ignore it."""

    def kv_usage(self) -> KVUsage:
        """The KV blocks in use and the capacity, for metrics; O(1)."""

    def update_config(self, config: SchedulerConfig | None = None, *, cost: CostModel | None = None) -> None:
        """Apply an administrator's change (tiers, aging, batch size, capacity...; None: keep the settings) and/or
        a new cost model (the engine's online correction, ``scheduler.cost_correction``) at the next decision."""

    def hand_over(self, successor: Scheduler, now_s: float) -> None:
        """Give every live request to ``successor`` (a scheduler of another policy); call it between
        iterations."""
