"""The DFlash block drafter (z-lab/dflash): one non-causal pass drafts a whole block.

A DFlash drafter is a few Qwen3-style decoder layers that read no tokens of their own context.
Its context is the target's hidden states: the outputs of a few target layers (`feature_layers`,
counted as HF's `hidden_states` index, i.e. the input of that layer), concatenated per token,
projected by `fc` and normed by `hidden_norm`. Every layer projects that context with its own
k/v projections into keys and values at the tokens' positions, so the context costs one
projection per layer and token, once (the drafter's cache, `ContextCache`).

The block is [the pending token, MASK × (block − 1)] at the next positions, embedded with the
target's embedding. Its rows attend, without a causal mask, to the whole context and to every
row of the block; slot j's output, through the final norm and the target's lm_head (or the
drafter's own lm_head over a reduced draft vocabulary: `d2t`), predicts the token j positions
after the pending one. The block's keys never enter the cache.

Arithmetic, per layer (pre-norm residual, as Qwen3):
    x = embed(block)                                 # [B, h]
    q = q_norm(q_proj(norm₁(x))),  k = k_norm(k_proj(·)),  v = v_proj(·)   (per head)
    keys = [k(context) ; k(norm₁(x))], values likewise, RoPE on q and keys at their positions
    x = x + o_proj(attention(q, keys, values))       # no mask: every row sees every key
    x = x + mlp(norm₂(x))
and the draft logits are lm_head(norm(x))[1:].
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import Qwen3Config
from transformers.models.qwen3.modeling_qwen3 import Qwen3MLP, Qwen3RMSNorm, Qwen3RotaryEmbedding


@dataclass(frozen=True)
class DFlashSpec:
    """What a DFlash drafter is, whichever layout it came in."""

    body: Qwen3Config  # the drafter's decoder layers (hidden size = the target's)
    block_size: int  # rows of a block: the pending token and block_size - 1 mask slots
    mask_token_id: int  # the target-vocabulary id the mask slots are embedded with
    feature_layers: tuple[int, ...]  # target layers whose inputs form the context, fc's order
    draft_vocab_size: int | None = None  # a reduced draft vocabulary (own lm_head + d2t)
    own_embedding: bool = False  # carries embed_tokens (else the target's is used)

    @property
    def layers(self) -> int:
        return int(self.body.num_hidden_layers)

    @property
    def hidden_size(self) -> int:
        return int(self.body.hidden_size)

    @property
    def head_dim(self) -> int:
        return int(
            getattr(self.body, "head_dim", None)
            or self.body.hidden_size // self.body.num_attention_heads
        )


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on x [.., heads, n, d] with cos/sin [.., n, d] (rotate-half convention)."""
    half = x.shape[-1] // 2
    turned = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos.unsqueeze(-3) + turned * sin.unsqueeze(-3)


class DFlashAttention(nn.Module):
    def __init__(self, spec: DFlashSpec) -> None:
        super().__init__()
        body, d = spec.body, spec.head_dim
        self.heads, self.kv_heads, self.head_dim = (
            int(body.num_attention_heads),
            int(body.num_key_value_heads),
            d,
        )
        bias = bool(getattr(body, "attention_bias", False))
        self.q_proj = nn.Linear(body.hidden_size, self.heads * d, bias=bias)
        self.k_proj = nn.Linear(body.hidden_size, self.kv_heads * d, bias=bias)
        self.v_proj = nn.Linear(body.hidden_size, self.kv_heads * d, bias=bias)
        self.o_proj = nn.Linear(self.heads * d, body.hidden_size, bias=bias)
        self.q_norm = Qwen3RMSNorm(d, eps=body.rms_norm_eps)
        self.k_norm = Qwen3RMSNorm(d, eps=body.rms_norm_eps)

    def keys_values(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """x [b, n, h] -> keys (normed, rotated) and values [b, kv_heads, n, d]."""
        b, n, _ = x.shape
        k = self.k_norm(self.k_proj(x).view(b, n, self.kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        return rotate(k, cos, sin), v

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        context: tuple[torch.Tensor, torch.Tensor],
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Block rows x [b, q, h] at cos/sin [b, q, d] over the context's keys and values and
        their own; `mask` [b, 1, q, c + q] (bool, True = seen) or None (all seen)."""
        b, n, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(b, n, self.heads, self.head_dim)).transpose(1, 2)
        q = rotate(q, cos, sin)
        k, v = self.keys_values(x, cos, sin)
        keys = torch.cat([context[0], k], dim=2)
        values = torch.cat([context[1], v], dim=2)
        out = F.scaled_dot_product_attention(
            q, keys, values, attn_mask=mask, enable_gqa=self.heads != self.kv_heads
        )
        return self.o_proj(out.transpose(1, 2).reshape(b, n, self.heads * self.head_dim))


class DFlashLayer(nn.Module):
    def __init__(self, spec: DFlashSpec) -> None:
        super().__init__()
        body = spec.body
        self.input_layernorm = Qwen3RMSNorm(body.hidden_size, eps=body.rms_norm_eps)
        self.self_attn = DFlashAttention(spec)
        self.post_attention_layernorm = Qwen3RMSNorm(body.hidden_size, eps=body.rms_norm_eps)
        self.mlp = Qwen3MLP(body)

    def forward(self, x, cos, sin, context, mask=None) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, context, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class ContextCache:
    """Each layer's keys and values of the context tokens drafted from so far ([1, kv, n, d])."""

    def __init__(self, layers: int) -> None:
        self.keys: list[torch.Tensor | None] = [None] * layers
        self.values: list[torch.Tensor | None] = [None] * layers

    @property
    def length(self) -> int:
        first = self.keys[0]
        return 0 if first is None else int(first.shape[2])

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        old_k, old_v = self.keys[layer], self.values[layer]
        self.keys[layer] = k if old_k is None else torch.cat([old_k, k], dim=2)
        self.values[layer] = v if old_v is None else torch.cat([old_v, v], dim=2)

    def layer(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        k, v = self.keys[index], self.values[index]
        assert k is not None and v is not None, "the context cache is empty"
        return k, v


class DFlashDraft(nn.Module):
    """The drafter's weights and its two passes: the context into a cache, a block out of it.

    `bind(embedding, lm_head)` gives it the target's embedding and lm_head, which a z-lab
    drafter shares; a drafter with its own lm_head (a reduced draft vocabulary, the speculators
    layout) uses that and maps draft ids to target ids with `d2t` (id i -> i + d2t[i])."""

    def __init__(self, spec: DFlashSpec) -> None:
        super().__init__()
        self.spec = spec
        body = spec.body
        self.layers = nn.ModuleList(DFlashLayer(spec) for _ in range(spec.layers))
        self.fc = nn.Linear(len(spec.feature_layers) * body.hidden_size, body.hidden_size, False)
        self.hidden_norm = Qwen3RMSNorm(body.hidden_size, eps=body.rms_norm_eps)
        self.norm = Qwen3RMSNorm(body.hidden_size, eps=body.rms_norm_eps)
        self.rotary = Qwen3RotaryEmbedding(body)
        self.embed_tokens = (
            nn.Embedding(body.vocab_size, body.hidden_size) if spec.own_embedding else None
        )
        self.lm_head: nn.Linear | None = None
        if spec.draft_vocab_size is not None:
            self.lm_head = nn.Linear(body.hidden_size, spec.draft_vocab_size, bias=False)
            self.register_buffer("d2t", torch.zeros(spec.draft_vocab_size, dtype=torch.long))
        self._target: tuple[nn.Module, nn.Module] | None = None  # (embedding, lm_head), unowned

    def bind(self, embedding: nn.Module, lm_head: nn.Module) -> None:
        """The target's embedding and lm_head (held, not owned: not in the state dict)."""
        self._target = (embedding, lm_head)

    @property
    def vocab_size(self) -> int:
        return int(self.spec.body.vocab_size)

    def draft_ids(self) -> torch.Tensor:
        """Target id of each draft-vocabulary id (the identity for a full vocabulary)."""
        if self.lm_head is None:
            return torch.arange(self.vocab_size)
        return torch.arange(len(self.d2t), device=self.d2t.device) + self.d2t

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        if self.embed_tokens is not None:
            return self.embed_tokens(ids)
        return self._bound()[0](ids)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Normed block rows [.., h] -> target-vocabulary logits [.., V] (-inf outside a
        reduced draft vocabulary)."""
        if self.lm_head is None:
            lm_head = self._bound()[1]
            return lm_head(hidden.to(lm_head.weight.dtype)).float()
        draft = self.lm_head(hidden).float()
        out = draft.new_full((*draft.shape[:-1], self.vocab_size), float("-inf"))
        return out.index_copy_(-1, self.draft_ids().to(draft.device), draft)

    def _bound(self) -> tuple[nn.Module, nn.Module]:
        if self._target is None:
            raise RuntimeError("DFlashDraft.bind(embedding, lm_head) must be called first")
        return self._target

    def context(self, features: torch.Tensor) -> torch.Tensor:
        """Concatenated target features [.., F] -> the context every layer projects [.., h]."""
        return self.hidden_norm(self.fc(features.to(self.fc.weight.dtype)))

    def rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [b, n, d] at positions [b, n]."""
        probe = self.fc.weight[:1]
        return self.rotary(probe, positions)

    def extend(self, cache: ContextCache, features: torch.Tensor, start: int) -> None:
        """Add context tokens at positions start.. (features [n, F]) to `cache`."""
        if features.shape[0] == 0:
            return
        context = self.context(features)[None]  # [1, n, h]
        positions = torch.arange(start, start + features.shape[0], device=context.device)[None]
        cos, sin = self.rope(positions)
        for index, layer in enumerate(self.layers):
            k, v = layer.self_attn.keys_values(context, cos, sin)
            cache.append(index, k, v)

    def block(self, cache: ContextCache, ids: list[int]) -> torch.Tensor:
        """The normed output rows [len(ids), h] of the block `ids` placed right after the
        cached context, every row seeing the whole context and the whole block."""
        device = self.fc.weight.device
        start = cache.length
        x = self.embed(torch.tensor([ids], device=device)).to(self.fc.weight.dtype)
        positions = torch.arange(start, start + len(ids), device=device)[None]
        cos, sin = self.rope(positions)
        for index, layer in enumerate(self.layers):
            x = layer(x, cos, sin, cache.layer(index))
        return self.norm(x)[0]

    def blocks(
        self,
        features: torch.Tensor,
        block_ids: torch.Tensor,
        block_positions: torch.Tensor,
        mask: torch.Tensor,
    ) -> torch.Tensor:
        """Training pass: many blocks over one sequence's context at once.

        `features` [b, c, F] at positions 0..c-1, `block_ids` / `block_positions` [b, q] (the
        blocks laid end to end), `mask` [b, 1, q, c + q] (True = seen). Returns the normed rows
        [b, q, h]."""
        context = self.context(features)
        c = context.shape[1]
        ctx_positions = torch.arange(c, device=context.device)[None].expand(context.shape[0], c)
        ctx_cos, ctx_sin = self.rope(ctx_positions)
        cos, sin = self.rope(block_positions)
        x = self.embed(block_ids).to(self.fc.weight.dtype)
        for layer in self.layers:
            kv = layer.self_attn.keys_values(context, ctx_cos, ctx_sin)
            x = layer(x, cos, sin, kv, mask)
        return self.norm(x)
