"""The one adapter over transformers' KV cache API.

Everything that creates, measures, truncates or compacts a cache goes through here, so a
transformers upgrade touches this file only (tested with transformers 5.24, where the model
argument is `cache=`, and 5.17, where it is still `past_key_values=`; `DynamicCache.crop` takes
a negative count in both).
"""

from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache, PretrainedConfig
from transformers.models.llama.modeling_llama import LlamaAttention

# the name under which models and layers take the cache; renamed during transformers 5.x
_NAMES = inspect.signature(LlamaAttention.forward).parameters
_CACHE_ARG = "cache" if "cache" in _NAMES else "past_key_values"


def cache_arg(cache: DynamicCache | None) -> dict:
    """`**cache_arg(cache)` passes the cache to a model or layer under its name there."""
    return {_CACHE_ARG: cache}


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
    if rows != list(range(len(rows))):
        # gather the kept rows (a copy of a few rows), write them into place, then truncate:
        # the prefix before `start` is never copied
        end = start + len(rows)
        with torch.inference_mode():  # the cache holds inference tensors
            for layer in cache.layers:
                index = torch.tensor(rows, device=layer.keys.device) + start
                layer.keys[..., start:end, :] = layer.keys[..., index, :]
                layer.values[..., start:end, :] = layer.values[..., index, :]
    truncate(cache, start + len(rows))
