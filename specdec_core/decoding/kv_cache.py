"""The one adapter over transformers' KV cache API.

Everything that creates, measures, truncates or compacts a cache goes through here, so a
transformers upgrade touches this file only (tested with transformers 5.24, where the model
argument is `cache=`, and 5.17, where it is still `past_key_values=`; `DynamicCache.crop` takes
a negative count in both).

Sliding-window and hybrid models (Mistral-style `sliding_window`, Qwen2 `max_window_layers`,
Gemma 2/3 `layer_types` mixing sliding and full attention). transformers' `DynamicCache(config)`
gives their sliding layers a `DynamicSlidingWindowLayer` that keeps only the last window − 1
positions, so once a sequence passes the window a rejected draft cannot be rolled back (`crop`
raises) and a tree cannot be compacted. `new_cache` therefore gives *every* attention layer a
`GrowingLayer` (a `DynamicLayer` writing into spare room) that keeps its whole history. The
window is still applied exactly: it lives in the attention mask, which the model builds per
layer type from absolute positions (chains), or `target.tree_attention` builds per layer type
(trees), so every layer sees the same keys it would see with a truncated cache and greedy
float32 output stays identical to `ar`. Chosen over a margin of k extra positions in the
sliding layers because it needs no sliding layer of our own, no margin to size for trees (a
tree forward appends every node) and no offsets in the masks; the price is memory and attention
time over the whole context in sliding layers, as for a full-attention model of the same size.

Refused, with a `SpecdecError` naming what was found: layers holding a recurrent state
(linear attention, Mamba-style conv / SSM, hybrid layers of both) or other per-layer state the
positions cannot be sliced out of (sparse-indexed, compressed attention), and caches other
than an un-offloaded `DynamicCache` of full layers (static, quantized, offloaded caches, a
config-built `DynamicCache` with sliding layers): none can drop rejected positions.
"""

from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache, PretrainedConfig
from transformers.cache_utils import DummyLayer, DynamicLayer, get_layer_types_and_kwargs
from transformers.models.llama.modeling_llama import LlamaAttention

from specdec_core.errors import SpecdecError

# the name under which models and layers take the cache; renamed during transformers 5.x
_NAMES = inspect.signature(LlamaAttention.forward).parameters
_CACHE_ARG = "cache" if "cache" in _NAMES else "past_key_values"

# layer types whose cache is a plain key/value history (`dummy`: a layer reading another
# layer's keys and values, or one without attention); the window is in the mask
ROLLBACK_TYPES = ("full_attention", "sliding_attention", "chunked_attention", "dummy")


def cache_arg(cache: DynamicCache | None) -> dict:
    """`**cache_arg(cache)` passes the cache to a model or layer under its name there."""
    return {_CACHE_ARG: cache}


def layer_types(config: PretrainedConfig) -> list[str]:
    """The cache layer type of each decoder layer, as transformers derives it from `config`."""
    types, _ = get_layer_types_and_kwargs(config.get_text_config(decoder=True))
    return list(types)


class GrowingLayer(DynamicLayer):
    """A `DynamicLayer` whose keys and values are views of buffers with room to grow.

    `DynamicLayer.update` concatenates, copying the layer's whole history at every forward: a
    cost that grows with the context and is paid by every method alike (about 5% of a step of
    the embedded model at 200 tokens of context on a CPU, docs/benchmarks.md). Here a forward
    writes its new positions into spare room after the history, and `keys` / `values` become
    views of the first `length` positions. Cropping (rollback) takes a shorter view of the
    same buffer and the next forward writes over the dropped positions; `keep` writes the
    accepted rows into place through the views. The room grows by a quarter of the length (at
    least `ROOM` positions) when it runs out, one copy per growth. Anything that replaces
    `keys` with a tensor of its own (a cache handed over by the prefix cache) is taken over at
    the next forward. A forward under autograd (training) concatenates instead, since
    autograd keeps views of the history it must not see overwritten.
    """

    ROOM = 256

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self.key_buffer = self.value_buffer = None

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        if torch.is_grad_enabled() and any(
            t.requires_grad for t in (key_states, value_states, self.keys, self.values)
        ):
            # training (an unrolled head pass): autograd holds views of the history for the
            # backward pass, and a write into spare room would change what it saved, so such
            # a forward concatenates into new tensors as DynamicLayer does
            self.key_buffer = self.value_buffer = None
            return super().update(key_states, value_states, *args, **kwargs)
        length = self.get_seq_length()
        end = length + key_states.shape[-2]
        if not self._fits(key_states, value_states, end):
            room = end + max(self.ROOM, length // 4)
            self.key_buffer = _buffer(self.keys, key_states, length, room)
            self.value_buffer = _buffer(self.values, value_states, length, room)
        self.key_buffer[..., length:end, :] = key_states
        self.value_buffer[..., length:end, :] = value_states
        self.keys = self.key_buffer[..., :end, :]
        self.values = self.value_buffer[..., :end, :]
        return self.keys, self.values

    def _fits(self, key_states: torch.Tensor, value_states: torch.Tensor, end: int) -> bool:
        """Do the buffers exist, still back `keys` / `values`, match the new states' batch,
        heads, width and dtype, and have room up to `end`?"""
        keys, values = self.key_buffer, self.value_buffer
        if keys is None or values is None or end > keys.shape[-2]:
            return False
        for held, buffer, new in (
            (self.keys, keys, key_states),
            (self.values, values, value_states),
        ):
            if held.numel() and held.data_ptr() != buffer.data_ptr():
                return False
            if buffer.shape[:-2] != new.shape[:-2] or buffer.shape[-1] != new.shape[-1]:
                return False
            if buffer.dtype != new.dtype or buffer.device != new.device:
                return False
        return True

    def reset(self) -> None:
        self.key_buffer = self.value_buffer = None
        super().reset()


def _buffer(held: torch.Tensor, new: torch.Tensor, length: int, room: int) -> torch.Tensor:
    """A buffer of `room` positions shaped like `new`, holding `held`'s first `length`."""
    buffer = new.new_empty((*new.shape[:-2], room, new.shape[-1]))
    if length:
        buffer[..., :length, :] = held[..., :length, :]
    return buffer


def new_cache(config: PretrainedConfig | None = None) -> DynamicCache:
    """A cache that can be rolled back and compacted: full history in every attention layer."""
    cache = DynamicCache()  # grows a DynamicLayer for every layer index it is given
    if config is None:
        return cache
    types = layer_types(config)
    refused = sorted(set(types) - set(ROLLBACK_TYPES))
    if refused:
        name = getattr(config, "model_type", None) or type(config).__name__
        raise SpecdecError(
            f"the {name} model has {', '.join(refused)} layers, whose cache state cannot be "
            "rolled back to drop a rejected draft; speculative decoding here needs attention "
            "layers (full or sliding window): use --method ar, or another model"
        )
    cache.layers = [DummyLayer() if kind == "dummy" else GrowingLayer() for kind in types]
    return cache


def generation_cache(config: PretrainedConfig) -> DynamicCache | None:
    """A cache for a batched `generate` call that writes each step into spare room instead of
    copying the history (a 64-row generation of 256 tokens in bf16 runs ~1.3x faster on a
    CPU, docs/eagle.md), or None where `config` has layers it cannot hold (transformers then
    builds its own)."""
    if set(layer_types(config)) - set(ROLLBACK_TYPES):
        return None
    return new_cache(config)


def check_rollback(cache) -> None:
    """Raise a SpecdecError unless `cache` can drop positions (see the module docstring)."""
    layers = getattr(cache, "layers", None)
    if type(cache) is DynamicCache and not cache.offloading and layers is not None:
        kinds = (DynamicLayer, GrowingLayer, DummyLayer)
        odd = next((x for x in layers if type(x) not in kinds), None)
        if odd is None:
            return
        what = f"a {type(odd).__name__} layer"
    else:
        what = "offloading" if getattr(cache, "offloading", False) else "its layout"
    raise SpecdecError(
        f"a {type(cache).__name__} cannot be rolled back after a rejected draft ({what}); "
        "speculative decoding needs a cache from specdec_core.decoding.kv_cache.new_cache (a "
        "DynamicCache whose layers keep every position)"
    )


def cache_length(cache: DynamicCache) -> int:
    return int(cache.get_seq_length())


def truncate(cache: DynamicCache, length: int) -> None:
    """Keep the first `length` positions (rollback after a rejected draft)."""
    excess = cache_length(cache) - length
    if excess < 0:
        raise ValueError(f"cannot truncate a cache of {cache_length(cache)} positions to {length}")
    if excess:
        check_rollback(cache)
        cache.crop(-excess)


def keep(cache: DynamicCache, start: int, rows: list[int]) -> None:
    """Keep positions [0, start) plus `start + r` for r in rows (ascending); drop the rest.

    After a tree forward the cache holds every tree node; this compacts the accepted path
    into place. A contiguous prefix of rows is a plain truncation.
    """
    if rows != list(range(len(rows))):
        check_rollback(cache)
        # gather the kept rows (a copy of a few rows), write them into place, then truncate:
        # the prefix before `start` is never copied
        end = start + len(rows)
        with torch.inference_mode():  # the cache holds inference tensors
            for layer in cache.layers:
                if isinstance(layer, DummyLayer) or not layer.is_initialized:
                    continue  # no keys of its own
                index = torch.tensor(rows, device=layer.keys.device) + start
                layer.keys[..., start:end, :] = layer.keys[..., index, :]
                layer.values[..., start:end, :] = layer.values[..., index, :]
    truncate(cache, start + len(rows))
