"""The target model as the decode loop sees it: prefill, one forward over proposed tokens, keep.

Invariant between steps: the KV cache holds every committed token except the last one (the
"pending" token). A step forwards [pending, *draft] in one call, so the autoregressive baseline
(no draft) and speculative methods cost the same kind of forward and are timed alike.

For tree drafts the forward gets an explicit 4-D additive attention mask and position ids:
each node sees the cached prefix, its ancestors and itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from specdec_core import attention_mask, kv_cache


@dataclass(frozen=True)
class TargetOutput:
    logits: torch.Tensor | None  # [n, V] (None for the prefill)
    hidden: torch.Tensor  # [n, h] last hidden state after the final norm (the EAGLE feature)
    layer_hidden: tuple[torch.Tensor, ...] = ()  # [n, h] per requested layer (EAGLE-3)


class Target:
    def __init__(self, model: PreTrainedModel, feature_layers: tuple[int, ...] = ()) -> None:
        self.model = model
        self.feature_layers = feature_layers  # hidden states entering these layers are returned
        self.cache = kv_cache.new_cache(model.config)
        self.device = model.device

    @property
    def length(self) -> int:
        return kv_cache.cache_length(self.cache)

    def reset(self) -> None:
        self.cache = kv_cache.new_cache(self.model.config)

    @torch.inference_mode()
    def prefill(self, ids: list[int]) -> TargetOutput:
        """Run the prompt (minus its last token) into the cache; return its features."""
        return self._run(ids, with_logits=False)

    @torch.inference_mode()
    def forward(self, ids: list[int], parents: tuple[int, ...] | None = None) -> TargetOutput:
        """Forward [pending, *proposal]; `parents[i]` is the parent of proposal node i (tree).

        Node i is row i+1; parent -1 means the pending token (row 0).
        """
        if parents is None:
            return self._run(ids, with_logits=True)
        mask, positions = tree_attention(parents, self.length, self.model.dtype, self.device)
        return self._run(ids, with_logits=True, mask=mask, positions=positions)

    def keep(self, start: int, rows: list[int]) -> None:
        """After a forward that began at cache length `start`, keep only `rows` of it."""
        kv_cache.keep(self.cache, start, rows)

    def _run(
        self,
        ids: list[int],
        with_logits: bool,
        mask: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
    ) -> TargetOutput:
        hidden_size = self.model.config.hidden_size
        if not ids:
            empty = torch.zeros(0, hidden_size, device=self.device, dtype=self.model.dtype)
            return TargetOutput(None, empty, tuple(empty for _ in self.feature_layers))
        input_ids = torch.tensor([ids], device=self.device)  # [1, n]
        out = self.model.model(
            input_ids=input_ids,
            attention_mask=mask,
            position_ids=positions,
            **kv_cache.cache_arg(self.cache),
            use_cache=True,
            output_hidden_states=bool(self.feature_layers),
        )
        hidden = out.last_hidden_state[0]  # [n, h]
        logits = self.model.lm_head(hidden).float() if with_logits else None  # [n, V]
        layers = tuple(out.hidden_states[i][0] for i in self.feature_layers)
        return TargetOutput(logits, hidden, layers)


def tree_attention(
    parents: tuple[int, ...], prefix: int, dtype: torch.dtype, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Additive mask [1, 1, n+1, prefix+n+1] and position ids [1, n+1] for [pending, *tree].

    Row 0 is the pending token (a child of the prefix); node i (row i+1) sees the prefix, the
    pending token, its ancestors and itself. Positions are prefix + depth.
    """
    n = len(parents) + 1
    allowed = torch.zeros(n, n, dtype=torch.bool)
    depth = [0] * n
    allowed[0, 0] = True
    for i, parent in enumerate(parents):
        row, parent_row = i + 1, parent + 1
        allowed[row] = allowed[parent_row]
        allowed[row, row] = True
        depth[row] = depth[parent_row] + 1
    positions = torch.tensor([depth], device=device) + prefix
    return attention_mask.after_prefix(allowed, prefix, dtype, device), positions
