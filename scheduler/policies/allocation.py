"""KV allocation for a chosen batch, and eviction (Hua et al., Algorithms 4-5), shared by every policy.

``KVAllocator`` owns the block accounting (``memory``), the ``eviction_heap`` of resident requests outside
the batch, and the swapped / recomputed token counts. The scheduler that holds it is its ``AllocationHost``:
the allocator asks it for a request's tier and key and hands displaced or unfit requests back to its queue,
so the allocator never needs to know which policy, or which queue, it serves.
"""

from __future__ import annotations

import math
from typing import Protocol

from scheduler.config import SchedulerConfig, TierPolicy
from scheduler.cost import CostModel, decoded_tokens_to_recompute, keep_or_recompute
from scheduler.decision import Decision, Preemption, PreemptionMode
from scheduler.memory import EvictionHeap, KVMemory
from scheduler.request import Request, Stage


class AllocationHost(Protocol):
    """What the allocator needs from the scheduler that holds it."""

    cost: CostModel  # read at each eviction: an executor's online correction may replace it between decisions

    def tier(self, r: Request) -> TierPolicy: ...

    def priority_key(self, r: Request, now_s: float) -> tuple: ...

    def may_lose_slot_to_memory(self, r: Request) -> bool:
        """Whether running ``r`` may be displaced from the batch so that a better member's KV fits."""

    def return_to_queue(self, r: Request, now_s: float, decision: Decision) -> None:
        """``r`` leaves the batch: back to the schedule queue (paused if it was running)."""

    def rekey_if_waiting(self, r: Request, now_s: float) -> None:
        """``r``'s remaining time changed (its KV was evicted): re-key it if it is in the schedule queue."""


def reserved_blocks(config: SchedulerConfig) -> dict[str, int]:
    """Each tier's reservation in blocks, from its ``reserved_kv_fraction`` of the capacity. O(tiers)."""
    return {name: int(t.reserved_kv_fraction * config.kv_capacity_blocks) for name, t in config.tiers.items()}


class KVAllocator:
    def __init__(self, host: AllocationHost, config: SchedulerConfig):
        self.host = host
        self.config = config
        self.memory = KVMemory(config.kv_capacity_blocks, config.block_size, reserved_blocks(config))
        self.eviction_heap = EvictionHeap()
        self.swapped_tokens = 0
        self.recomputed_tokens = 0

    @property
    def cost(self) -> CostModel:
        """The host's cost model, so that one swap of it (``BaseScheduler.update_config``) reaches both."""
        return self.host.cost

    def reconfigure(self, config: SchedulerConfig) -> None:
        """A new capacity, block size, reservations or eviction mode; holdings are kept. O(resident)."""
        self.config = config
        self.memory.capacity_blocks = config.kv_capacity_blocks
        self.memory.set_block_size(config.block_size)
        self.memory.set_reservations(reserved_blocks(config))

    def adopt(self, r: Request, tier: str, blocks: int, key: tuple) -> None:
        """Take over ``r`` holding ``blocks`` blocks (from another scheduler) as an eviction candidate. O(log n)."""
        self.memory.resize(r.id, tier, blocks * self.memory.block_size)
        self.eviction_heap.push(r, key)

    def release(self, request_id: str) -> None:
        """``request_id`` is done or cancelled: its blocks are free and it is no eviction candidate. O(1)."""
        self.eviction_heap.discard(request_id)
        self.memory.free(request_id)

    # --- memory (Hua et al. Algorithms 4-5) ----------------------------------------------------------
    def allocate(self, now_s: float, batch: list[Request], decision: Decision) -> None:
        """Give every batch member blocks for its whole context, best first, evicting victims from the
        eviction heap as needed; members that still do not fit return to the queue. O(b + victims log n)."""
        memory, evictions, host = self.memory, self.eviction_heap, self.host
        for r in batch:
            evictions.discard(r.id)
        # Fast path: everything the batch needs fits without touching any tier's reservation.
        block_size, held = memory.block_size, memory.held_blocks
        growing = []
        total = 0
        for r in batch:
            tokens = r.prompt_tokens + r.generated_tokens
            need = -(-tokens // block_size) - held(r.id)
            if need:
                growing.append((r, tokens))
                total += need
        if total <= memory.unreserved_free_blocks():
            for r, tokens in growing:
                memory.resize(r.id, host.tier(r).name, tokens)
            return
        i = 0
        while i < len(batch):
            r = batch[i]
            tier = host.tier(r).name
            tokens = r.prompt_tokens + r.generated_tokens
            need = memory.blocks_for(tokens) - memory.held_blocks(r.id)
            skipped: list[Request] = []
            while need > memory.headroom(tier):
                victim = evictions.pop()
                if victim is None:
                    j = self._displaceable_member(batch, i)
                    if j is not None:  # displace the worst member behind r that may be displaced
                        worst = batch.pop(j)
                        host.return_to_queue(worst, now_s, decision)
                        evictions.discard(worst.id)
                        if worst.kv_tokens_on_device:
                            self._evict(worst, now_s, decision)
                        continue
                    break
                if memory.frees_for(victim.id, tier):
                    self._evict(victim, now_s, decision)
                else:
                    skipped.append(victim)
            for v in skipped:
                evictions.push(v, host.priority_key(v, now_s))
            if need > memory.headroom(tier):
                batch.pop(i)
                host.return_to_queue(r, now_s, decision)
                continue
            memory.resize(r.id, tier, tokens)
            i += 1

    def _displaceable_member(self, batch: list[Request], i: int) -> int | None:
        """The index of the worst member behind ``batch[i]`` that may lose its slot: one not yet running, or a
        running one the host lets go (limited preemption and the tier's cap protect the others, memory
        pressure included). None: every member behind ``i`` is protected. O(b)."""
        for j in range(len(batch) - 1, i, -1):
            r = batch[j]
            if r.stage not in (Stage.PREFILL, Stage.DECODE) or self.host.may_lose_slot_to_memory(r):
                return j
        return None

    def _evict(self, victim: Request, now_s: float, decision: Decision) -> None:
        tokens = victim.kv_tokens_on_device
        kept = self.tokens_to_keep(victim, tokens)
        mode = PreemptionMode.SWAP if kept == tokens else PreemptionMode.DROP if kept == 0 else PreemptionMode.PARTIAL
        self.memory.free(victim.id)
        victim.kv_tokens_on_device = 0
        victim.kv_tokens_on_host += kept
        victim.stage = Stage.PREEMPTED_SWAPPED if victim.kv_tokens_on_host else Stage.PREEMPTED_DROPPED
        self.swapped_tokens += kept
        self.recomputed_tokens += tokens - kept
        decision.preemptions.append(Preemption(victim, mode, kept))
        self.host.rekey_if_waiting(victim, now_s)  # its remaining time now includes the reload or the recompute

    def tokens_to_keep(self, r: Request, tokens: int) -> int:
        """Hua et al. Algorithm 5: keep the prefilled tokens when beta < alpha1*n + alpha2, then all the decoded
        ones but m* (``decoded_tokens_to_recompute``). The paper's m* recomputes the first decoded tokens; the KV
        store keeps a prefix, so here the last m* are the ones recomputed (same count; where m* = 0, every preset,
        no difference). O(1)."""
        mode = self.config.eviction
        if mode == "swap":
            return tokens
        if mode == "recompute":
            return 0
        prefilled = min(tokens, r.prompt_tokens)
        if not keep_or_recompute(prefilled, self.cost):
            return 0
        decoded = tokens - prefilled
        return prefilled + max(0, decoded - math.ceil(decoded_tokens_to_recompute(prefilled, self.cost)))
