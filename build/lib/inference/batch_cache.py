"""The running batch's KV cache as transformers sees it: per-layer buffers with spare columns on the right.

transformers' ``DynamicLayer`` appends a step's keys and values with ``torch.cat``, copying the layer's whole cache
every step, and building a ``DynamicCache`` from existing tensors copies it once more. Here a layer writes the
new columns in place into a buffer with room to spare (grown by doubling when full), so a decode step costs
O(batch x new tokens) of cache writes instead of O(batch x context), amortised. The model gets views of the used
columns; the runner keeps the same layers from one step to the next while the batch's membership is unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import DynamicLayer
from transformers.cache_utils import Cache

MIN_SPARE_COLUMNS = 64


class SpareCapacityLayer(DynamicLayer):
    """A ``DynamicLayer`` whose ``keys``/``values`` ([B, H, T, D]) are views of larger buffers [B, H, capacity, D]."""

    def __init__(self, keys: torch.Tensor | None = None, values: torch.Tensor | None = None):
        super().__init__()
        self._key_buf: torch.Tensor | None = None
        self._value_buf: torch.Tensor | None = None
        self.width = 0
        if keys is not None and values is not None:
            self.device = keys.device
            self._key_buf, self._value_buf, self.width = keys, values, keys.shape[-2]
            self.keys, self.values = keys, values
            self.is_initialized = True

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        shape = (*key_states.shape[:2], 0, key_states.shape[-1])
        self._key_buf = key_states.new_empty(shape)
        self._value_buf = value_states.new_empty(shape)
        self.width = 0
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the new columns after the used ones: O(new columns), plus a copy when the buffer is full (it then
        grows to twice its size, and at least MIN_SPARE_COLUMNS past the new end)."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start, end = self.width, self.width + key_states.shape[-2]
        if end > self._key_buf.shape[-2]:
            self._grow(max(2 * self._key_buf.shape[-2], end + MIN_SPARE_COLUMNS))
        self._key_buf[:, :, start:end] = key_states
        self._value_buf[:, :, start:end] = value_states
        self.width = end
        self.keys, self.values = self._key_buf[:, :, :end], self._value_buf[:, :, :end]
        return self.keys, self.values

    def _grow(self, capacity: int) -> None:
        for name in ("_key_buf", "_value_buf"):
            old = getattr(self, name)
            new = old.new_empty((*old.shape[:2], capacity, old.shape[-1]))
            new[:, :, : self.width] = old[:, :, : self.width]
            setattr(self, name, new)


def batch_cache(layers: Sequence[tuple[torch.Tensor, torch.Tensor]], num_layers: int) -> Cache:
    """A cache over the batch's per-layer (keys, values), or an empty one; nothing is copied."""
    if layers:
        return Cache(layers=[SpareCapacityLayer(k, v) for k, v in layers])
    return Cache(layers=[SpareCapacityLayer() for _ in range(num_layers)])
