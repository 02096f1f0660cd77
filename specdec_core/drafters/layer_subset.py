"""Running a chosen subset of a transformers decoder's layers over the target's own KV cache.

Self-speculative drafting (drafters/layer_skip.py, drafters/swift.py) runs the target with
some of its sublayers left out. A `SkipSet` names them: a layer whose attention and MLP are
both skipped is skipped whole (its module is not called); a layer with only one of them
skipped has that sublayer replaced by zero, so the residual stream passes it unchanged (the
norms before it still run; a norm of zero is zero, Gemma's post-norms included).

`forward_subset` runs the model's own forward (its embedding scale, its rotary embeddings per
layer type, its final norm) with those modules swapped in for the call, and returns logits
through the model's lm_head with `final_logit_softcapping` applied, as `target.py` does. The
swap is undone before it returns, also on an error; the model is never run concurrently (the
engine holds one lock over a run).

Positions and masks. A skipped layer's cache is not written, so during a draft the cache's
layers differ in length and layer 0's length (what transformers reads when it is given no
positions) may not be the true position. `forward_subset` therefore always passes explicit
position ids and an explicit additive mask built from the true prefix length, the chain case
of `target.tree_attention`: any layer may be skipped, layer 0 included, and sliding-window and
chunked layers get the same per-layer-type windowed masks as the target's own tree forward.

Cache. Written only in the kept layers, at positions `prefix ..`; `restore(cache, length)`
crops every layer back to `length` (each by its own excess), so the target's cache is
bit-identical to before: the `GrowingLayer`s of kv_cache.py wrote past the end of their
history and cropping only shortens the views. `prefix_view(cache, length)` is a second cache
whose layers read the first `length` positions of `cache` and append by concatenation, never
writing into `cache`: a forward over already committed positions (SWIFT's scoring of a layer
set) leaves the target's entries untouched.

Refused with a `SpecdecError`: decoders whose layers are not `model.model.layers`, layer
indices out of range, skipping every layer, and models with layers sharing another layer's
cache or holding none (a skipped source layer would leave its readers stale).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn
from transformers import DynamicCache
from transformers.cache_utils import DummyLayer, DynamicLayer

from specdec_core.decoding import kv_cache
from specdec_core.decoding.target import Target, tree_attention
from specdec_core.errors import SpecdecError


@dataclass(frozen=True)
class SkipSet:
    """Sublayers left out of a draft forward: layer indices whose attention / MLP is skipped."""

    attention: frozenset[int] = frozenset()
    mlp: frozenset[int] = frozenset()

    @classmethod
    def layers(cls, layers: Iterable[int]) -> SkipSet:
        """Whole layers skipped (attention and MLP)."""
        chosen = frozenset(int(i) for i in layers)
        return cls(chosen, chosen)

    @classmethod
    def early_exit(cls, exit_layer: int, num_layers: int) -> SkipSet:
        """Layers [0, exit_layer) kept, then the final norm and lm_head (LayerSkip)."""
        return cls.layers(range(exit_layer, num_layers))

    @property
    def whole(self) -> tuple[int, ...]:
        """Layers skipped whole, ascending."""
        return tuple(sorted(self.attention & self.mlp))

    @property
    def attention_only(self) -> tuple[int, ...]:
        return tuple(sorted(self.attention - self.mlp))

    @property
    def mlp_only(self) -> tuple[int, ...]:
        return tuple(sorted(self.mlp - self.attention))

    @property
    def size(self) -> int:
        """Sublayers skipped (a whole layer counts two)."""
        return len(self.attention) + len(self.mlp)

    def record(self) -> dict[str, list[int]]:
        """JSON-ready: the layers skipped whole, and those with only attention / MLP skipped."""
        return {
            "skipped_layers": list(self.whole),
            "skipped_attention": list(self.attention_only),
            "skipped_mlp": list(self.mlp_only),
        }


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The target's decoder layers (`model.model.layers`), or a SpecdecError."""
    try:
        layers = model.model.get_submodule("layers")
    except AttributeError:
        layers = None
    if not isinstance(layers, nn.ModuleList):
        raise SpecdecError(
            f"layer skipping needs a decoder whose layers are model.layers; "
            f"{type(model).__name__} has none: use another method"
        )
    return layers


def check(model: nn.Module, skip: SkipSet) -> None:
    """Raise a SpecdecError unless `skip` can draft with `model` (see the module docstring)."""
    count = len(decoder_layers(model))
    odd = sorted(i for i in skip.attention | skip.mlp if not 0 <= i < count)
    if odd:
        raise SpecdecError(
            f"layer {odd[0]} does not exist: the model has layers 0..{count - 1}; "
            "choose skipped layers in that range"
        )
    if len(skip.whole) == count:
        raise SpecdecError("the draft would skip every layer; keep at least one")
    if "dummy" in kv_cache.layer_types(model.config):
        raise SpecdecError(
            "layer skipping needs every decoder layer to hold its own keys and values; this "
            "model has layers sharing another layer's cache or holding none: use another method"
        )


class _Passthrough(nn.Module):
    """A skipped decoder layer: the hidden states go through unchanged."""

    def forward(self, hidden_states: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        return hidden_states


class _ZeroAttention(nn.Module):
    """A skipped attention sublayer: adds nothing to the residual stream, writes no cache."""

    def forward(self, hidden_states: torch.Tensor, *args, **kwargs):
        return torch.zeros_like(hidden_states), None


class _ZeroMLP(nn.Module):
    """A skipped MLP sublayer: adds nothing to the residual stream."""

    def forward(self, hidden_states: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        return torch.zeros_like(hidden_states)


@contextmanager
def skipping(model: nn.Module, skip: SkipSet) -> Iterator[None]:
    """`model` runs without the sublayers of `skip` inside the block; restored on exit."""
    layers = decoder_layers(model)
    swapped: list[tuple[nn.Module, str, nn.Module]] = []  # (owner, attribute, original)
    try:
        for index in sorted(skip.attention | skip.mlp):
            layer = layers[index]
            if index in skip.whole:
                swapped.append((layers, str(index), layer))
                layers[index] = _Passthrough()
                continue
            name, stand_in = (
                ("self_attn", _ZeroAttention()) if index in skip.attention else ("mlp", _ZeroMLP())
            )
            try:
                original = layer.get_submodule(name)
            except AttributeError:
                raise SpecdecError(
                    f"cannot skip only part of layer {index}: {type(layer).__name__} has no "
                    f"{name}; skip whole layers instead"
                ) from None
            swapped.append((layer, name, original))
            setattr(layer, name, stand_in)
        yield
    finally:
        for owner, name, original in reversed(swapped):
            if owner is layers:
                layers[int(name)] = original
            else:
                setattr(owner, name, original)


@torch.inference_mode()
def forward_subset(
    target: Target,
    tokens: list[int],
    prefix: int,
    skip: SkipSet,
    cache: DynamicCache | None = None,
    last_only: bool = True,
) -> torch.Tensor:
    """Logits [n, V] (float32, soft-capped as the target's) of `tokens` at positions
    `prefix, prefix + 1, ..` through the kept sublayers, reading the first `prefix` positions
    of `cache` (default: the target's) and appending the kept layers' entries after them.
    `last_only`: the last row's logits only ([1, V]), the lm_head run once."""
    model = target.model
    parents = tuple(range(-1, len(tokens) - 2))  # a chain: row i + 1 follows row i
    mask, positions = tree_attention(parents, prefix, model.dtype, target.device, target.windows)
    input_ids = torch.tensor([tokens], device=target.device)
    with skipping(model, skip):
        out = model.model(
            input_ids=input_ids,
            attention_mask=mask,
            position_ids=positions,
            **kv_cache.cache_arg(target.cache if cache is None else cache),
            use_cache=True,
        )
    hidden = out.last_hidden_state[0, -1:] if last_only else out.last_hidden_state[0]
    logits = model.lm_head(hidden).float()  # [n, V]
    if target.softcap:
        logits = torch.tanh(logits / target.softcap) * target.softcap
    return logits


def layer_lengths(cache: DynamicCache) -> list[int]:
    """Positions held by each layer (0 for layers holding none)."""
    return [
        0 if isinstance(layer, DummyLayer) or not layer.is_initialized else layer.get_seq_length()
        for layer in cache.layers
    ]


def restore(cache: DynamicCache, length: int) -> None:
    """Crop every layer of `cache` to `length` positions, each by its own excess."""
    for layer, held in zip(cache.layers, layer_lengths(cache), strict=True):
        if held > length:
            layer.crop(length - held)
        elif held < length and not isinstance(layer, DummyLayer):
            raise ValueError(f"a cache layer holds {held} positions, fewer than {length}")


def prefix_view(cache: DynamicCache, length: int) -> DynamicCache:
    """A cache reading the first `length` positions of `cache`'s layers (views, no copy) that
    appends by concatenation, so a forward through it never writes into `cache`."""
    view = DynamicCache()
    layers = []
    for layer in cache.layers:
        copy = DynamicLayer()
        if not isinstance(layer, DummyLayer) and layer.is_initialized:
            copy.lazy_initialization(layer.keys, layer.values)
            copy.keys = layer.keys[..., :length, :]
            copy.values = layer.values[..., :length, :]
        layers.append(copy)
    view.layers = layers
    return view
