"""Per-request KV caches that are not in the running batch: resident on the device, or swapped to host.

One request's cache is one tensor of shape [layers, 2 (key, value), kv_heads, tokens, head_dim], compact
(no padding). The model runner owns the caches of the requests in its running batch and hands them back
here (`put`) when a request leaves the batch; it takes them (`take`) when a request joins.

    put / take          O(1) bookkeeping (the runner copies the tensors)
    swap_out / swap_in  one copy of the request's cache, device <-> host (pinned memory on CUDA)
    drop                frees it; resuming recomputes it with a prefill
    keep_prefix(m)      keeps the first m tokens on host, drops the rest (partial keep, docs/architecture.md §3)
"""

from __future__ import annotations

from enum import StrEnum

import torch


class KVLocation(StrEnum):
    DEVICE = "device"
    HOST = "host"
    NONE = "none"


class KVStore:
    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)
        self._device_kv: dict[str, torch.Tensor] = {}
        self._host_kv: dict[str, torch.Tensor] = {}
        self.swapped_out_tokens = 0
        self.swapped_in_tokens = 0

    # --- bookkeeping -------------------------------------------------------------------------------
    def put(self, request_id: str, kv: torch.Tensor) -> None:
        """Store a request's compact cache on the device (it just left the running batch)."""
        self._host_kv.pop(request_id, None)
        self._device_kv[request_id] = kv

    def take(self, request_id: str) -> torch.Tensor | None:
        """Remove and return a request's cache on the device (swapping it in if needed); None if it has none."""
        if request_id in self._host_kv:
            self.swap_in(request_id)
        return self._device_kv.pop(request_id, None)

    def location(self, request_id: str) -> KVLocation:
        if request_id in self._device_kv:
            return KVLocation.DEVICE
        if request_id in self._host_kv:
            return KVLocation.HOST
        return KVLocation.NONE

    def tokens(self, request_id: str) -> int:
        kv = self._device_kv.get(request_id)
        if kv is None:
            kv = self._host_kv.get(request_id)
        return 0 if kv is None else int(kv.shape[3])

    def device_tokens(self) -> int:
        return sum(int(kv.shape[3]) for kv in self._device_kv.values())

    def host_tokens(self) -> int:
        return sum(int(kv.shape[3]) for kv in self._host_kv.values())

    # --- preemption --------------------------------------------------------------------------------
    def swap_out(self, request_id: str) -> None:
        kv = self._device_kv.pop(request_id)
        self._host_kv[request_id] = _to_host(kv)
        self.swapped_out_tokens += int(kv.shape[3])

    def swap_in(self, request_id: str) -> None:
        kv = self._host_kv.pop(request_id)
        self._device_kv[request_id] = kv.to(self.device, non_blocking=True)
        self.swapped_in_tokens += int(kv.shape[3])

    def drop(self, request_id: str) -> None:
        self.free(request_id)

    def keep_prefix(self, request_id: str, kept_tokens: int) -> None:
        """Keep the first `kept_tokens` of the cache, on host; drop the rest (they will be recomputed)."""
        kv = self._device_kv.pop(request_id, None)
        if kv is None:
            kv = self._host_kv.pop(request_id)
        kept_tokens = max(0, min(kept_tokens, int(kv.shape[3])))
        if kept_tokens == 0:
            self._host_kv.pop(request_id, None)
            return
        self._host_kv[request_id] = _to_host(kv[:, :, :, :kept_tokens, :])
        self.swapped_out_tokens += kept_tokens

    def free(self, request_id: str) -> None:
        self._device_kv.pop(request_id, None)
        self._host_kv.pop(request_id, None)


def _to_host(kv: torch.Tensor) -> torch.Tensor:
    if kv.device.type == "cpu":
        return kv.clone()  # a slice would pin the whole parent tensor; a copy frees it
    host = torch.empty(kv.shape, dtype=kv.dtype, device="cpu", pin_memory=True)
    host.copy_(kv, non_blocking=True)
    return host
