"""A conversation's target KV cache, kept between turns so the next turn prefills only what
is new.

A chat's second turn is the first turn's prompt and reply plus a new user message. Without
reuse the target prefills the whole history again; with a `PrefixCache` passed to
`decode.generate`, the loop keeps the cached positions of the longest common prefix of the
tokens the cache covers and the new prompt, prefills only the rest, and afterwards leaves the
cache covering the whole new conversation (every committed token but the pending last one).

The target's features (its last hidden state, and the extra layers an EAGLE-3 head reads) are
kept beside the cache for the same positions, because a feature-level drafter starts from the
features of the whole prompt. A cache made for one model, or for other feature layers, is not
reused (`reusable` returns 0) and is rebuilt by the next run.

The cached values were computed by the earlier turn's forwards (several rows at a time, then
compacted), so a reused prefix equals a fresh prefill up to float rounding: in float32 the
output at temperature 0 is the same as a fresh run over the whole history (tested).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache

from specdec_core.decoding import kv_cache


def common_prefix(output: Sequence[int], reference: Sequence[int]) -> int:
    """Number of tokens before the first difference."""
    for i, (a, b) in enumerate(zip(output, reference, strict=False)):
        if a != b:
            return i
    return min(len(output), len(reference))


@dataclass
class PrefixCache:
    ids: list[int] = field(default_factory=list)  # the positions the cache holds
    cache: DynamicCache | None = None
    hidden: torch.Tensor | None = None  # [n, h] the target's feature per cached position
    layer_hidden: tuple[torch.Tensor, ...] = ()  # [n, h] per extra feature layer
    feature_layers: tuple[int, ...] = ()
    model_key: int | None = None  # which model made it (its id)
    reused: int = 0  # positions the last run took from here instead of computing them

    def reusable(self, model, prompt_ids: list[int], feature_layers: tuple[int, ...]) -> int:
        """How many leading positions of `prompt_ids[:-1]` the cache can supply."""
        if self.cache is None or self.model_key != id(model):
            return 0
        if feature_layers != self.feature_layers:
            return 0
        return common_prefix(self.ids, prompt_ids[:-1])

    def take(self, length: int) -> DynamicCache:
        """The cache cut to its first `length` positions (the caller extends it)."""
        assert self.cache is not None
        kv_cache.truncate(self.cache, length)
        return self.cache

    def features(self, length: int) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        assert self.hidden is not None
        return self.hidden[:length], tuple(h[:length] for h in self.layer_hidden)

    def store(
        self,
        model,
        ids: list[int],
        cache: DynamicCache,
        hidden: torch.Tensor,
        layer_hidden: tuple[torch.Tensor, ...],
        feature_layers: tuple[int, ...],
    ) -> None:
        """After a run: the cache covers `ids`, with one feature row per position."""
        self.ids, self.cache, self.hidden = list(ids), cache, hidden
        self.layer_hidden, self.feature_layers, self.model_key = (
            layer_hidden,
            feature_layers,
            id(model),
        )

    def clear(self) -> None:
        self.ids, self.cache, self.hidden, self.layer_hidden = [], None, None, ()
        self.model_key, self.reused = None, 0
