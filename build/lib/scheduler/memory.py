"""KV memory in blocks, per-tier reservations, and the eviction heap (Hua et al., Algorithm 4).

``KVMemory`` counts blocks of ``block_size`` tokens against a capacity. A tier may reserve a fraction of the
blocks: blocks reserved for tier T and not used by T are unavailable to every other tier. All operations
are O(1) (headroom keeps the outstanding reservation as a running total).

``EvictionHeap`` is a max-heap (by the scheduling key, worst first) over resident requests that are not in
the current batch: least urgent first, then longest remaining. Entries are invalidated lazily, so push,
discard and pop are O(log n) amortised.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Mapping

from scheduler.request import Request


class KVMemory:
    def __init__(self, capacity_blocks: int, block_size: int, reserved_blocks: Mapping[str, int] | None = None):
        self.capacity_blocks = capacity_blocks
        self.block_size = block_size
        self.used_blocks = 0
        self.peak_blocks = 0
        self._held: dict[str, tuple[int, str]] = {}  # request id -> (blocks, tier it was charged to)
        self._used_by_tier: dict[str, int] = {}
        self._reserved: dict[str, int] = {}
        self._outstanding_reserved = 0  # sum over tiers of max(0, reserved - used)
        self.set_reservations(reserved_blocks or {})

    def set_reservations(self, reserved_blocks: Mapping[str, int]) -> None:
        self._reserved = {t: b for t, b in reserved_blocks.items() if b > 0}
        self._outstanding_reserved = sum(
            max(0, b - self._used_by_tier.get(t, 0)) for t, b in self._reserved.items()
        )

    def set_block_size(self, block_size: int) -> None:
        """Re-express every holding in blocks of the new size (rounded up: a holding never shrinks below the
        tokens it covered). O(resident requests)."""
        if block_size == self.block_size:
            return
        held = [(rid, blocks * self.block_size, tier) for rid, (blocks, tier) in self._held.items()]
        self.block_size = block_size
        for rid, tokens, tier in held:
            self.resize(rid, tier, tokens)

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def held_blocks(self, request_id: str) -> int:
        held = self._held.get(request_id)
        return held[0] if held else 0

    def headroom(self, tier: str) -> int:
        """Blocks a request of ``tier`` may still take: free blocks less other tiers' unused reservations."""
        own_outstanding = max(0, self._reserved.get(tier, 0) - self._used_by_tier.get(tier, 0))
        return self.capacity_blocks - self.used_blocks - (self._outstanding_reserved - own_outstanding)

    def unreserved_free_blocks(self) -> int:
        """Free blocks that are no tier's outstanding reservation: any tier may take them."""
        return self.capacity_blocks - self.used_blocks - self._outstanding_reserved

    def frees_for(self, victim_id: str, tier: str) -> bool:
        """Whether evicting ``victim_id`` raises the headroom of ``tier`` at all."""
        held = self._held.get(victim_id)
        if held is None:
            return False
        victim_tier = held[1]
        return victim_tier == tier or self._used_by_tier.get(victim_tier, 0) > self._reserved.get(victim_tier, 0)

    def resize(self, request_id: str, tier: str, tokens: int) -> None:
        """Hold exactly enough blocks for ``tokens`` tokens (grow or shrink)."""
        blocks = self.blocks_for(tokens)
        old_blocks, old_tier = self._held.get(request_id, (0, tier))
        if old_tier != tier:
            self._charge(old_tier, -old_blocks)
            old_blocks = 0
        self._charge(tier, blocks - old_blocks)
        if blocks:
            self._held[request_id] = (blocks, tier)
        else:
            self._held.pop(request_id, None)

    def free(self, request_id: str) -> int:
        held = self._held.pop(request_id, None)
        if held is None:
            return 0
        self._charge(held[1], -held[0])
        return held[0]

    def _charge(self, tier: str, delta: int) -> None:
        if not delta:
            return
        before = self._used_by_tier.get(tier, 0)
        after = before + delta
        self._used_by_tier[tier] = after
        reserved = self._reserved.get(tier, 0)
        if reserved:
            self._outstanding_reserved += max(0, reserved - after) - max(0, reserved - before)
        self.used_blocks += delta
        if self.used_blocks > self.peak_blocks:
            self.peak_blocks = self.used_blocks


class EvictionHeap:
    """Max-heap of eviction victims keyed by the negated scheduling key; lazy invalidation."""

    def __init__(self) -> None:
        self._heap: list[tuple[tuple, int, Request]] = []
        self._live: dict[str, int] = {}  # request id -> seq of its valid entry
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._live

    def push(self, request: Request, scheduling_key: tuple) -> None:
        """O(log n). The worst scheduling key pops first."""
        seq = next(self._seq)
        self._live[request.id] = seq
        heapq.heappush(self._heap, (tuple(-x for x in scheduling_key), seq, request))

    def discard(self, request_id: str) -> None:
        """O(1): the entry is skipped when it reaches the top."""
        self._live.pop(request_id, None)

    def pop(self) -> Request | None:
        """The least urgent, longest-remaining resident request; O(log n) amortised."""
        heap = self._heap
        while heap:
            _, seq, request = heapq.heappop(heap)
            if self._live.get(request.id) == seq:
                del self._live[request.id]
                return request
        return None

    def ids(self) -> set[str]:
        return set(self._live)
