"""The target's cache layers write new positions into spare room instead of concatenating:
every read must equal what transformers' concatenating layer holds after the same updates."""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from specdec_core import kv_cache
from specdec_core.kv_cache import GrowingLayer


def states(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(1, 3, n, 8, generator=generator), torch.randn(
        1, 3, n, 8, generator=generator
    )


def pair() -> tuple[DynamicCache, DynamicCache]:
    growing, plain = DynamicCache(), DynamicCache()
    growing.layers, plain.layers = [GrowingLayer()], [DynamicLayer()]
    return growing, plain


def assert_same(growing: DynamicCache, plain: DynamicCache) -> None:
    assert kv_cache.cache_length(growing) == kv_cache.cache_length(plain)
    assert torch.equal(growing.layers[0].keys, plain.layers[0].keys)
    assert torch.equal(growing.layers[0].values, plain.layers[0].values)


@torch.inference_mode()
def test_updates_rollbacks_and_tree_compaction_read_as_the_concatenating_cache():
    growing, plain = pair()
    for step, n in enumerate([40, 1, 8, 3, 300, 8, 1]):  # a prefill, then decode steps
        key, value = states(n, step)
        out_growing = growing.update(key, value, 0)
        out_plain = plain.update(key, value, 0)
        assert all(torch.equal(a, b) for a, b in zip(out_growing, out_plain, strict=True))
        assert_same(growing, plain)
        if n > 1:  # a tree of n rows: keep the root and two nodes, as after verification
            start = kv_cache.cache_length(plain) - n
            for cache in (growing, plain):
                kv_cache.keep(cache, start, [0, 2, n - 1])
            assert_same(growing, plain)
        for cache in (growing, plain):  # a rejected chain: roll back one position
            kv_cache.truncate(cache, kv_cache.cache_length(cache) - 1)
        assert_same(growing, plain)


@torch.inference_mode()
def test_a_forward_writes_into_the_room_left_without_copying_the_history():
    layer = GrowingLayer()
    layer.update(*states(10, 0))
    buffer = layer.key_buffer
    for step in range(1, 50):
        layer.update(*states(1, step))
    assert layer.key_buffer is buffer  # 10 + 49 positions fit the first room
    assert layer.keys.data_ptr() == buffer.data_ptr() and layer.get_seq_length() == 59
    layer.update(*states(GrowingLayer.ROOM, 99))  # past the room: one copy into a larger one
    assert layer.key_buffer is not buffer and layer.get_seq_length() == 59 + GrowingLayer.ROOM


@torch.inference_mode()
def test_keys_handed_over_from_elsewhere_are_taken_over_at_the_next_forward():
    growing, plain = pair()
    key, value = states(12, 0)
    for cache in (growing, plain):
        cache.update(key, value, 0)
    held = growing.layers[0]
    held.keys, held.values = held.keys.clone(), held.values.clone()  # e.g. a prefix cache's copy
    key, value = states(2, 1)
    for cache in (growing, plain):
        cache.update(key, value, 0)
    assert_same(growing, plain)
