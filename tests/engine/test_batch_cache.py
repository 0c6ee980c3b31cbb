"""The batch cache appends in place: the same keys and values as concatenation, without copying the past."""

from __future__ import annotations

import torch

from inference.batch_cache import MIN_SPARE_COLUMNS, SpareCapacityLayer, batch_cache


def _kv(columns: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, 3, columns, 4, generator=g), torch.randn(2, 3, columns, 4, generator=g)


def test_appended_columns_read_back_as_the_concatenation_of_past_and_new():
    past_k, past_v = _kv(5, 0)
    layer = SpareCapacityLayer(past_k.clone(), past_v.clone())
    expected_k, expected_v = past_k, past_v
    for step in range(1, 80):
        k, v = _kv(1 if step % 7 else 3, step)
        got_k, got_v = layer.update(k, v)
        expected_k, expected_v = torch.cat([expected_k, k], dim=2), torch.cat([expected_v, v], dim=2)
        assert torch.equal(got_k, expected_k) and torch.equal(got_v, expected_v)
    assert layer.get_seq_length() == expected_k.shape[2]


def test_a_decode_step_writes_into_spare_columns_without_moving_the_cache():
    layer = SpareCapacityLayer()
    layer.update(*_kv(10, 0))  # a prefill: the buffer gets room to spare
    buffer = layer.keys.untyped_storage().data_ptr()
    for step in range(MIN_SPARE_COLUMNS - 1):
        layer.update(*_kv(1, step + 1))
        assert layer.keys.untyped_storage().data_ptr() == buffer
    assert layer.keys.shape[2] == 10 + MIN_SPARE_COLUMNS - 1


def test_an_empty_batch_cache_has_a_layer_per_model_layer_and_no_tokens():
    cache = batch_cache([], num_layers=3)
    assert len(cache.layers) == 3 and cache.get_seq_length() == 0
