"""The target model as the decode loop sees it: prefill, one forward over proposed tokens, keep.

Invariant between steps: the KV cache holds every committed token except the last one (the
"pending" token). A step forwards [pending, *draft] in one call, so the autoregressive baseline
(no draft) and speculative methods cost the same kind of forward and are timed alike.

For tree drafts the forward gets an explicit 4-D additive attention mask and position ids:
each node sees the cached prefix, its ancestors and itself. On sliding-window (or chunked)
layers it sees, of those, only the keys a causal forward of its own path would let it see:
positions within the window of its own position. A model mixing layer types (Gemma 2/3,
Qwen2 with `max_window_layers`) gets one mask per layer type; the cache keeps every position
of every layer (kv_cache.py), so the same tensors serve chains and trees.

Logits follow the model's own head: `final_logit_softcapping` (Gemma 2) is applied.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from specdec_core.decoding import attention_mask, kv_cache
from specdec_core.errors import SpecdecError
from specdec_core.models.cpu_attention import forward_keywords
from specdec_core.models.loading import input_device


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
        self.device = input_device(model)  # the embedding's, also under a device map
        self.windows = layer_windows(model.config)
        self.softcap = getattr(
            model.config.get_text_config(decoder=True), "final_logit_softcapping", None
        )

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
        mask, positions = tree_attention(
            parents, self.length, self.model.dtype, self.device, self.windows
        )
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
            **forward_keywords(self.model),
        )
        hidden = out.last_hidden_state[0]  # [n, h]
        logits = self.model.lm_head(hidden).float() if with_logits else None  # [n, V]
        if logits is not None and self.softcap:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        layers = tuple(out.hidden_states[i][0] for i in self.feature_layers)
        return TargetOutput(logits, hidden, layers)


# what a layer type lets a query at position q see of a key at position k (k <= q): a window
# of `size` positions (sliding) or the same block of `size` positions (chunked)
Window = tuple[str, int]


def layer_windows(config) -> dict[str, Window | None]:
    """Layer type (as the model names it in its mask mapping) -> its window; None = full."""
    text = config.get_text_config(decoder=True)
    named = getattr(text, "layer_types", None) or kv_cache.layer_types(config)
    windows: dict[str, Window | None] = {}
    for kind in dict.fromkeys(named):
        if kind == "sliding_attention":
            windows[kind] = ("sliding", int(text.sliding_window))
        elif kind == "chunked_attention":
            windows[kind] = ("chunked", int(text.attention_chunk_size))
        elif kind in ("full_attention", "dummy", "moe", "mlp"):
            windows[kind] = None
        else:
            raise SpecdecError(
                f"cannot build a tree attention mask for {kind} layers; use a chain method "
                "(classic, eagle, ngram) or --method ar"
            )
    return windows


def tree_attention(
    parents: tuple[int, ...],
    prefix: int,
    dtype: torch.dtype,
    device: torch.device,
    windows: dict[str, Window | None] | None = None,
) -> tuple[torch.Tensor | dict[str, torch.Tensor], torch.Tensor]:
    """Additive mask [1, 1, n+1, prefix+n+1] and position ids [1, n+1] for [pending, *tree].

    Row 0 is the pending token (a child of the prefix); node i (row i+1) sees the prefix, the
    pending token, its ancestors and itself. Positions are prefix + depth. With `windows`
    (layer_windows) naming sliding or chunked layers, the mask is a dict by layer type and
    those layers' masks also hide keys outside each row's window (by position).
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
    full = torch.cat([torch.ones(n, prefix, dtype=torch.bool), allowed], dim=1)
    positions = torch.tensor([depth]) + prefix  # [1, n]
    distinct = set((windows or {}).values())
    if not distinct - {None}:
        return attention_mask.additive(full, dtype, device), positions.to(device)
    query = positions[0][:, None]  # [n, 1]
    key = torch.cat([torch.arange(prefix), positions[0]])[None]  # [1, prefix + n]
    masks: dict[Window | None, torch.Tensor] = {}
    for window in distinct:
        if window is None:
            visible = full
        elif window[0] == "sliding":
            visible = full & (key > query - window[1])
        else:
            visible = full & (key // window[1] == query // window[1])
        masks[window] = attention_mask.additive(visible, dtype, device)
    if len(masks) == 1:
        return next(iter(masks.values())), positions.to(device)
    return {kind: masks[window] for kind, window in windows.items()}, positions.to(device)
