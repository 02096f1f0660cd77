"""The one adapter over transformers' KV cache API.

Everything that creates, measures, truncates or compacts a cache goes through here, so a
transformers upgrade touches this file only (tested with transformers 5.x, where the model
argument is `cache=` and `DynamicCache.crop` takes a negative count).
"""

from __future__ import annotations

import torch
from transformers import DynamicCache, PretrainedConfig


def new_cache(config: PretrainedConfig | None = None) -> DynamicCache:
    return DynamicCache(config=config) if config is not None else DynamicCache()


def cache_length(cache: DynamicCache) -> int:
    return int(cache.get_seq_length())


def truncate(cache: DynamicCache, length: int) -> None:
    """Keep the first `length` positions (rollback after a rejected draft)."""
    excess = cache_length(cache) - length
    if excess < 0:
        raise ValueError(f"cannot truncate a cache of {cache_length(cache)} positions to {length}")
    if excess:
        cache.crop(-excess)


def keep(cache: DynamicCache, start: int, rows: list[int]) -> None:
    """Keep positions [0, start) plus `start + r` for r in rows (ascending); drop the rest.

    After a tree forward the cache holds every tree node; this compacts the accepted path
    into place. A contiguous prefix of rows is a plain truncation.
    """
    if rows == list(range(len(rows))):
        truncate(cache, start + len(rows))
        return
    for layer in cache.layers:
        index = torch.tensor(rows, device=layer.keys.device) + start
        layer.keys = torch.cat([layer.keys[..., :start, :], layer.keys[..., index, :]], dim=-2)
        layer.values = torch.cat(
            [layer.values[..., :start, :], layer.values[..., index, :]], dim=-2
        )
