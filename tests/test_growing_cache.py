"""The target's cache layers write new positions into spare room instead of concatenating:
every read must equal what transformers' concatenating layer holds after the same updates."""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from specdec_core.decoding import kv_cache
from specdec_core.decoding.kv_cache import GrowingLayer


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


def test_training_through_the_cache_gives_the_concatenating_caches_gradients():
    """An unrolled head pass trains through the cache: the second pass's keys land after the
    first's while autograd still holds the first pass's keys for the backward pass."""
    grads = []
    for cache in pair():
        leaves = [s.requires_grad_() for s in (*states(5, 1), *states(3, 2))]
        keys, values = cache.update(leaves[0], leaves[1], 0)
        loss = (keys**2).sum() + (values**3).sum()  # both saved for the backward pass
        keys, values = cache.update(leaves[2] * 2, leaves[3] * 2, 0)
        (loss + (keys**2).sum() * (values**2).sum()).backward()
        grads.append([leaf.grad for leaf in leaves])
    for growing, plain in zip(*grads, strict=True):
        assert torch.equal(growing, plain)
    growing, plain = pair()
    with torch.no_grad():  # drafting again after training: back to writing into spare room
        for cache in (growing, plain):
            cache.update(*states(5, 1), 0)
            cache.update(*states(3, 2), 0)
    assert_same(growing, plain)
    assert growing.layers[0].keys.data_ptr() == growing.layers[0].key_buffer.data_ptr()
