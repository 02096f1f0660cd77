"""The EAGLE draft head: a decoder layer (or a few) that predicts the target's next feature.

One class, two official layouts (docs/architecture.md#eagle-heads):

- `eagle1` (EAGLE-1/2): `fc = Linear(2h, h)` over cat(embedding(x_{t+1}), f_t), embedding
  first; Llama decoder layers `layers.0` (whose input norm is the identity), `layers.1`, ...
  (official EAGLE-1 code reads `num_hidden_layers`; its released heads have one); no final norm.
  The output hidden state *is* the predicted feature f_{t+1}; logits come from the target's
  lm_head. The feature is the target's last hidden state after its final norm.
- `eagle3` (EAGLE-3): `fc = Linear(3h, h, bias=False)` over the target's hidden states
  entering layers (2, L//2, L-3); `midlayer` whose attention takes
  cat(input_layernorm(emb), hidden_norm(h)); its own `norm` and `lm_head` over a reduced
  draft vocabulary. Later draft steps feed the head's own output hidden state back, without fc.
  Published EAGLE-3 heads depart from this arithmetic in a few named ways, each an
  `Eagle3Variant` field (formats.py reads them from config.json; docs/eagle.md#formats).

Either layout may carry a reduced draft vocabulary: `d2t[i]` maps draft id i to target id
i + d2t[i] (EAGLE-3 convention). For `eagle1` the draft lm_head is then the target's lm_head
rows for those ids (no weights of its own). On a CPU the lm_head over the full vocabulary is
most of a draft step, so the draft vocabulary decides the draft cost.

Stepping API (used by the chain drafter and the EAGLE-2 tree drafter):

    head = load_head(spec, target)                     # eagle/formats.py; bound to the target
    cache = head.new_cache()                           # the head's own KV cache
    out = head.step(features, tokens, positions, mask, cache)
        features  [B, n, F]  F = h (target feature, or the head's own out.hidden fed back)
                             or 3h (eagle3: concatenated target layers, `variant.fused`
                             of them; fc is applied)
        tokens    [B, n]     the token *after* each feature (shifted one step ahead)
        positions [B, n]     explicit position ids (tree: prefix length + depth)
        mask      [B, 1, n, cache_len + n] additive float mask (0 allowed, finfo.min not),
                             including the cached columns; None = causal over the new rows
        cache     appended with n positions; compact it with kv_cache.keep / truncate
    out.hidden  [B, n, h]   predicted features (feed back as `features` for the next depth)
    out.logits  [B, n, Vd]  draft-vocabulary logits (computed on first use; training
                             never asks, drafting asks head.logits(row) for one row)
    head.to_target(out.logits) -> [B, n, V] target-vocabulary logits (-inf outside the draft
                             vocabulary), ready for sampling.probs / log_softmax
    head.target_ids(draft_ids) -> target ids of draft-vocabulary ids (top-k in draft space)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch
from torch import nn
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import (
    LlamaAttention,
    LlamaDecoderLayer,
    LlamaMLP,
    LlamaRMSNorm,
    LlamaRotaryEmbedding,
)

from specdec_core.decoding import attention_mask, kv_cache
from specdec_core.errors import SpecdecError
from specdec_core.heads.eagle import fused_layer
from specdec_core.heads.eagle.fused_layer import FUSED_ROWS, LayerFusion
from specdec_core.models.prepacked_linear import PackedWeight, PrepackedLinear

KINDS = ("eagle1", "eagle3")


# a target's per-layer attention pattern (sliding windows, layer types), which a head's own
# Llama layers do not share: a head attends over its short cache with full attention
_TARGET_ONLY = (
    "layer_types", "sliding_window", "use_sliding_window", "max_window_layers",
    "_sliding_window_pattern", "sliding_window_pattern", "attention_chunk_size",
)  # fmt: skip


def head_config(config, **overrides) -> LlamaConfig:
    """A Llama config for a head (or a draft) on the target with `config`: its sizes, full
    attention, and the RoPE of its full-attention layers where RoPE differs by layer type."""
    values = {k: v for k, v in config.to_dict().items() if k not in _TARGET_ONLY}
    rope = values.get("rope_parameters")
    if isinstance(rope, dict) and isinstance(rope.get("full_attention"), dict):
        values["rope_parameters"] = rope["full_attention"]  # Gemma 3: one set per layer type
    return LlamaConfig(**{**values, **overrides})


def fused_layers(target_layers: int) -> tuple[int, ...]:
    """Indices into the target's `hidden_states` (0 = embeddings) that an EAGLE-3 head reads,
    low to high: the inputs of layers 2, L//2 and L-3."""
    if target_layers < 2:  # hidden_states[2] must exist
        raise SpecdecError(
            f"an EAGLE-3 head reads the inputs of target layers 2, L//2 and L-3, but this target "
            f"has {target_layers} layer(s); use an EAGLE-1 head (--arch eagle1)"
        )
    return (2, target_layers // 2, target_layers - 3)


@dataclass(frozen=True)
class Eagle3Variant:
    """Where a published EAGLE-3 head's arithmetic departs from the official head's; the
    defaults are the official head (SafeAILab EAGLE-3, SpecForge before EAGLE 3.1)."""

    aux_layers: tuple[int, ...] = ()  # hidden_states indices fc reads, in order; () = 2, L//2, L-3
    norm_before_fc: bool = False  # `input_norm`: one RMSNorm over the concatenated target states
    fc_norm: bool = False  # `fc_norm.i`: an RMSNorm per target state before fc (EAGLE 3.1)
    norm_before_residual: bool = False  # the midlayer's residual is hidden_norm(h), not h
    norm_output: bool = False  # norm(h) is both lm_head's input and the state fed back (3.1)
    window: int = 0  # the midlayer attends over the last `window` positions only; 0 = all

    @property
    def fused(self) -> int:
        """How many target hidden states fc reads."""
        return len(self.aux_layers) or 3


OFFICIAL = Eagle3Variant()


class HeadOutput:
    """A head pass: predicted features, and their logits computed only when asked for."""

    def __init__(self, hidden: torch.Tensor, head: EagleHead) -> None:
        self.hidden = hidden  # [B, n, h] predicted next features
        self._head = head

    @cached_property
    def logits(self) -> torch.Tensor:
        """[B, n, Vd] draft-vocabulary logits of every row (use head.logits for fewer rows)."""
        return self._head.logits(self.hidden)


class Eagle3Layer(nn.Module):
    """EAGLE-3 `midlayer`: attention over cat(input_layernorm(emb), hidden_norm(h)); the
    residual is h, or hidden_norm(h) with `norm_before_residual` (speculators' option)."""

    def __init__(self, config: LlamaConfig, norm_before_residual: bool = False) -> None:
        super().__init__()
        self.norm_before_residual = norm_before_residual
        h, eps = config.hidden_size, config.rms_norm_eps
        self.self_attn = LlamaAttention(config, layer_idx=0)
        attn = self.self_attn
        for name in ("q_proj", "k_proj", "v_proj"):
            old = getattr(attn, name)
            setattr(attn, name, nn.Linear(2 * h, old.out_features, bias=old.bias is not None))
        self.mlp = LlamaMLP(config)
        self.input_layernorm = LlamaRMSNorm(h, eps=eps)
        self.hidden_norm = LlamaRMSNorm(h, eps=eps)
        self.post_attention_layernorm = LlamaRMSNorm(h, eps=eps)

    def forward(self, emb, hidden, mask, position_embeddings, cache, fusion=None) -> torch.Tensor:
        """`fusion`: this layer's `LayerFusion` for a drafting pass (fused_layer.py)."""
        normed = self.hidden_norm(hidden)
        residual = normed if self.norm_before_residual else hidden
        x = torch.cat([self.input_layernorm(emb), normed], dim=-1)
        if fusion is not None:
            x = fused_layer.attention(self.self_attn, fusion, x, mask, position_embeddings, cache)
            hidden = residual + x
            return hidden + fused_layer.mlp(self.mlp, fusion, self.post_attention_layernorm(hidden))
        x, _ = self.self_attn(x, position_embeddings, mask, **kv_cache.cache_arg(cache))
        hidden = residual + x
        return hidden + self.mlp(self.post_attention_layernorm(hidden))


class EagleHead(nn.Module):
    def __init__(
        self,
        config: LlamaConfig,
        kind: str = "eagle1",
        bias: bool = True,
        draft_vocab: int = 0,
        layers: int = 1,
        variant: Eagle3Variant = OFFICIAL,
    ) -> None:
        """`draft_vocab` 0 = the full target vocabulary (eagle1 only; eagle3 always reduces).
        `layers`: decoder layers of an eagle1 head (EAGLE-3 has one `midlayer`).
        `variant`: a published EAGLE-3 head's own arithmetic (eagle3 only)."""
        super().__init__()
        if kind not in KINDS:
            raise ValueError(f"unknown EAGLE head kind {kind!r}; expected one of {KINDS}")
        if kind == "eagle1" and variant != OFFICIAL:
            raise SpecdecError(
                f"an EAGLE-1/2 head has none of the EAGLE-3 options ({variant}); its config.json "
                "belongs to an EAGLE-3 head"
            )
        if layers < 1 or (kind == "eagle3" and layers != 1):
            raise SpecdecError(
                f"an {kind} head cannot have {layers} decoder layers: EAGLE-1 heads have one "
                "or more, EAGLE-3 heads exactly one (its midlayer)"
            )
        config = head_config(config, num_hidden_layers=layers)
        config._attn_implementation = "sdpa"
        self.config, self.kind, self.variant = config, kind, variant
        h = config.hidden_size
        self.draft_vocab = draft_vocab or (config.vocab_size if kind == "eagle3" else 0)
        if kind == "eagle1":
            self.fc = nn.Linear(2 * h, h, bias=bias)
            self.layers = nn.ModuleList(LlamaDecoderLayer(config, i) for i in range(layers))
            self.layers[0].input_layernorm = nn.Identity()  # absent in the official layout
        else:
            eps, fused = config.rms_norm_eps, variant.fused
            self.input_norm = LlamaRMSNorm(fused * h, eps=eps) if variant.norm_before_fc else None
            self.fc_norm = (
                nn.ModuleList(LlamaRMSNorm(h, eps=eps) for _ in range(fused))
                if variant.fc_norm
                else None
            )
            self.fc = nn.Linear(fused * h, h, bias=False)
            self.midlayer = Eagle3Layer(config, variant.norm_before_residual)
            self.norm = LlamaRMSNorm(h, eps=config.rms_norm_eps)
            self.lm_head = nn.Linear(h, self.draft_vocab, bias=False)
        if self.draft_vocab:
            self.register_buffer("d2t", torch.zeros(self.draft_vocab, dtype=torch.long))
            self.register_buffer("t2d", torch.zeros(config.vocab_size, dtype=torch.bool))
        self.rotary = LlamaRotaryEmbedding(config)
        self._target: tuple[nn.Module, nn.Module] | None = None  # (embedding, lm_head), unowned
        self._draft_head: PackedWeight | None = None  # eagle1 + reduced vocab: gathered rows
        self._fusions: dict[int, LayerFusion] = {}  # layer index -> its drafting projections
        self.fused_drafting = True  # draft through fused projections where exact (_fusion)
        self.register_load_state_dict_post_hook(EagleHead._drop_copies)

    def _apply(self, fn, recurse=True):
        """`.to(dtype)` and friends, but RoPE's frequencies stay float32: cast to bf16, the
        angle at position 500 would be off by radians. The drafting copies are made again."""
        super()._apply(fn, recurse)
        if self.rotary.inv_freq.dtype != torch.float32:
            self.rotary = LlamaRotaryEmbedding(self.config).to(self.rotary.inv_freq.device)
        self._drop_copies()
        return self

    def train(self, mode: bool = True) -> EagleHead:
        """`train()` / `eval()`; the drafting copies are made again after either."""
        super().train(mode)
        self._drop_copies()
        return self

    def _drop_copies(self, *_) -> None:
        """Forget the copies drafting makes from the weights (fused projections, gathered
        draft-vocabulary rows): called whenever the weights change (`load_state_dict`, `.to`,
        `train` / `eval`); the next drafting pass makes them from the weights as they are."""
        self._fusions = {}
        self._draft_head = None

    # -- binding to the target ---------------------------------------------------------
    def bind(self, embedding: nn.Module, lm_head: nn.Module) -> EagleHead:
        """Use the target's embedding (and, for eagle1, lm_head); they are not head weights."""
        self._target = (embedding, lm_head)
        self._draft_head = None
        return self

    def set_draft_vocab(self, target_ids: torch.Tensor) -> None:
        """Restrict drafting to `target_ids` (sorted ascending): fills d2t / t2d."""
        ids = target_ids.to(self.d2t.device)
        self.d2t.copy_(ids - torch.arange(len(ids), device=ids.device))
        self.t2d.zero_()
        self.t2d[ids] = True
        self._draft_head = None

    @property
    def embedding(self) -> nn.Module:
        if self._target is None:
            raise RuntimeError("EagleHead.bind(embedding, lm_head) must be called first")
        return self._target[0]

    def draft_ids(self) -> torch.Tensor | None:
        """Target ids of the draft vocabulary, or None when it is the full vocabulary."""
        if not self.draft_vocab:
            return None
        return torch.arange(self.draft_vocab, device=self.d2t.device) + self.d2t

    # -- stepping ------------------------------------------------------------------------
    def new_cache(self):
        return kv_cache.new_cache(self.config)

    def step(self, features, tokens, positions, mask=None, cache=None) -> HeadOutput:
        """One head pass over n new rows; see the module docstring for shapes."""
        emb = self.embedding(tokens).to(self.fc.weight.dtype)  # [B, n, h]
        features = features.to(self.fc.weight.dtype)
        past = kv_cache.cache_length(cache) if cache is not None else 0
        if mask is None and (tokens.shape[-1] > 1 or emb.device.type != "cpu"):
            mask = attention_mask.causal(tokens.shape[-1], past, emb.dtype, emb.device)
        # one new row on the CPU sees every column: no mask (an all-zero mask gives the same
        # bits through the CPU's attention kernel, built and added for nothing)
        rope = self.rotary(emb, positions)
        if self.kind == "eagle1":
            hidden = self.fc(torch.cat([emb, features], dim=-1))
            for i, layer in enumerate(self.layers):
                fusion = self._fusion(i, layer.self_attn, layer.mlp, hidden)
                if fusion is not None:
                    hidden = fused_layer.decoder_layer(layer, fusion, hidden, mask, rope, cache)
                    continue
                hidden = layer(
                    hidden, attention_mask=mask, position_embeddings=rope,
                    **kv_cache.cache_arg(cache),
                )  # fmt: skip
            return HeadOutput(hidden, self)
        if self.variant.window and int(positions.max()) >= self.variant.window:
            raise SpecdecError(
                f"this EAGLE-3 head attends over a sliding window of {self.variant.window} "
                "positions (its config's layer_types), which drafting here does not apply; "
                f"keep prompt and output under {self.variant.window} tokens"
            )
        if features.shape[-1] != self.config.hidden_size:
            features = self.fuse(features)  # target layers, first step
        layer = self.midlayer
        fusion = self._fusion(0, layer.self_attn, layer.mlp, emb)
        hidden = layer(emb, features, mask, rope, cache, fusion)
        if self.variant.norm_output:  # EAGLE 3.1: the normed state is fed back and drafted from
            hidden = self.norm(hidden)
        return HeadOutput(hidden, self)

    def _fusion(
        self, index: int, attn: nn.Module, mlp: nn.Module, x: torch.Tensor
    ) -> LayerFusion | None:
        """Layer `index`'s fused projections for a drafting pass over `x` (made on the first
        pass after the weights changed), or None: training, `fused_drafting` off, more rows than
        FUSED_ROWS, or linears that will not run packed for `x` (only oneDNN's packed kernels
        give the fused and the separate products the same bits)."""
        linears = (attn.q_proj, attn.k_proj, attn.v_proj, mlp.gate_proj, mlp.up_proj)
        if (
            torch.is_grad_enabled()
            or not self.fused_drafting
            or x[..., 0].numel() > FUSED_ROWS
            or not all(
                isinstance(linear, PrepackedLinear) and linear.packed.runs_packed(x)
                for linear in linears
            )
        ):
            return None
        fusion = self._fusions.get(index)
        if fusion is None:
            fusion = self._fusions[index] = LayerFusion(attn, mlp)
        return fusion

    def fuse(self, features: torch.Tensor) -> torch.Tensor:
        """[.., fused * h] concatenated target hidden states -> [.., h] (EAGLE-3's fc)."""
        if self.input_norm is not None:
            features = self.input_norm(features)
        if self.fc_norm is not None:
            chunks = features.chunk(len(self.fc_norm), dim=-1)
            features = torch.cat(
                [norm(x) for norm, x in zip(self.fc_norm, chunks, strict=True)], -1
            )
        return self.fc(features)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[.., h] -> [.., Vd] draft-vocabulary logits."""
        if self.kind == "eagle3":  # with norm_output the hidden state is normed already
            return self.lm_head(hidden if self.variant.norm_output else self.norm(hidden))
        target_head = self._target[1] if self._target is not None else None
        if target_head is None:
            raise RuntimeError("EagleHead.bind(embedding, lm_head) must be called first")
        if not self.draft_vocab:
            return target_head(hidden.to(target_head.weight.dtype))
        dtype = self.fc.weight.dtype  # the rows in the head's dtype
        if self._draft_head is None:
            rows = target_head.weight[self.draft_ids()].detach().to(dtype)  # [Vd, h]
            self._draft_head = PackedWeight(rows)
        return self._draft_head(hidden.to(dtype))

    def to_target(self, logits: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary logits [.., Vd] -> target-vocabulary logits [.., V] (-inf outside)."""
        if not self.draft_vocab:
            return logits
        out = logits.new_full((*logits.shape[:-1], self.config.vocab_size), float("-inf"))
        return out.index_copy_(-1, self.draft_ids(), logits)

    def target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids if not self.draft_vocab else draft_ids + self.d2t[draft_ids]
