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

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from scheduler.request import Request, Stage


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
    # Added (compatible): requests taken out of the running batch whose KV stays where it is (on device).
    # Nothing to carry out; listed so the executor can publish the `preempted` state.
    paused: list[Request] = field(default_factory=list)

    @property
    def is_idle(self) -> bool:
        return not self.batch


class Scheduler(Protocol):
    """The one interface the simulator and the live engine drive."""

    name: str

    def submit(self, request: Request) -> None:
        """Add an arrival to the unsorted arrival buffer: O(1), safe to call from another thread."""

    def schedule(self, now_s: float) -> Decision:
        """Choose the next batch, its stage, and the preemptions to carry out first."""

    def complete_iteration(self, now_s: float, decision: Decision, finished_ids: Iterable[str]) -> None:
        """Account the tokens the batch emitted; requests in finished_ids are done and free their KV."""

    def cancel(self, request_id: str) -> None:
        """Cancel a waiting or running request; its KV is freed via the next decision's `cancelled`."""

    def reprioritise(self, request_id: str, level: int, tier: str | None = None) -> None:
        """Change a request's level (a dispatcher override) and tier (None: the new level's); takes effect at
        the next decision."""

    def has_work(self) -> bool:
        """True while any request is waiting, running or preempted."""
