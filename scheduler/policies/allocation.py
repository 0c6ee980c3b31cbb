"""KV allocation for a chosen batch, and eviction (Hua et al., Algorithms 4-5), shared by every policy.

A mixin of ``BaseScheduler``: it uses the scheduler's ``memory``, ``eviction_heap``, ``config``, ``cost``,
``tier``, ``priority_key``, ``_push`` and ``_return_to_queue``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scheduler.cost import keep_or_recompute, optimal_decoded_tokens_to_keep
from scheduler.decision import Decision, Preemption, PreemptionMode
from scheduler.request import Request, Stage

if TYPE_CHECKING:
    from scheduler.policies.base import BaseScheduler


class KVAllocation:
    # --- memory (Hua et al. Algorithms 4-5) ----------------------------------------------------------
    def _allocate(self: BaseScheduler, now_s: float, batch: list[Request], decision: Decision) -> None:
        """Give every batch member blocks for its whole context, best first, evicting victims from the
        eviction heap as needed; members that still do not fit return to the queue. O(b + victims log n)."""
        memory, evictions = self.memory, self.eviction_heap
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
                memory.resize(r.id, self.tier(r).name, tokens)
            return
        i = 0
        while i < len(batch):
            r = batch[i]
            tier = self.tier(r).name
            tokens = r.prompt_tokens + r.generated_tokens
            need = memory.blocks_for(tokens) - memory.held_blocks(r.id)
            skipped: list[Request] = []
            while need > memory.headroom(tier):
                victim = evictions.pop()
                if victim is None:
                    j = self._displaceable_member(batch, i)
                    if j is not None:  # displace the worst member behind r that may be displaced
                        worst = batch.pop(j)
                        self._return_to_queue(worst, now_s, decision)
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
                evictions.push(v, self.priority_key(v, now_s))
            if need > memory.headroom(tier):
                batch.pop(i)
                self._return_to_queue(r, now_s, decision)
                continue
            memory.resize(r.id, tier, tokens)
            i += 1

    def _displaceable_member(self: BaseScheduler, batch: list[Request], i: int) -> int | None:
        """The index of the worst member behind ``batch[i]`` that may lose its slot: one not yet running, or a
        running one that is preemptible (limited preemption and the tier's cap protect the others, memory
        pressure included). None: every member behind ``i`` is protected. O(b)."""
        for j in range(len(batch) - 1, i, -1):
            r = batch[j]
            if r.stage not in (Stage.PREFILL, Stage.DECODE) or (self.preemptive and self.preemptible(r)):
                return j
        return None

    def _evict(self: BaseScheduler, victim: Request, now_s: float, decision: Decision) -> None:
        tokens = victim.kv_tokens_on_device
        kept = self._tokens_to_keep(victim, tokens)
        mode = PreemptionMode.SWAP if kept == tokens else PreemptionMode.DROP if kept == 0 else PreemptionMode.PARTIAL
        self.memory.free(victim.id)
        victim.kv_tokens_on_device = 0
        victim.kv_tokens_on_host += kept
        victim.stage = Stage.PREEMPTED_SWAPPED if victim.kv_tokens_on_host else Stage.PREEMPTED_DROPPED
        self.swapped_tokens += kept
        self.recomputed_tokens += tokens - kept
        decision.preemptions.append(Preemption(victim, mode, kept))
        if victim.id in self._heap_seq:
            self._push(victim, now_s)  # its remaining time now includes the reload or the recompute

    def _tokens_to_keep(self: BaseScheduler, r: Request, tokens: int) -> int:
        """Hua et al. Algorithm 5: keep the prefilled tokens when beta < alpha1*n + alpha2, then the first m*
        decoded ones."""
        mode = self.config.eviction
        if mode == "swap":
            return tokens
        if mode == "recompute":
            return 0
        prefilled = min(tokens, r.prompt_tokens)
        if not keep_or_recompute(prefilled, self.cost):
            return 0
        decoded = tokens - prefilled
        return prefilled + min(decoded, int(optimal_decoded_tokens_to_keep(prefilled, self.cost)))
