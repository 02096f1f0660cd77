"""The head's decoder layer for drafting: q, k and v in one matrix multiply, gate and up in another.

A draft pass runs the head over a few rows, so each of its linears is one small call that reads
its weights once; transformers' Llama layer makes seven of them (q, k, v, o, gate, up, down).
Stacking the weights of q, k and v, and of gate and up (`FusedProjections`), makes it four,
with the same bits for the few rows a drafting pass has: each output column is still its own
dot product over the same inputs (tests/test_fused_layer.py checks drafts and states bit for
bit against the Llama layer). oneDNN picks other kernels for many rows (in bf16 the stacked
and separate products part from about 64 rows), so passes of more than `FUSED_ROWS` rows (a
prompt) and training (`torch.is_grad_enabled()`) run the Llama layer.

    decoder_layer(layer, fused, hidden, mask, rope, cache)   # an EAGLE-1 layer
    attention(attn, fused, x, mask, rope, cache)             # the attention of either layout
    mlp(mlp_module, fused, x)

`fused` is the layer's `LayerFusion`: stacked copies made once from the linears' weights.
Its owner (`EagleHead`) drops its fusions whenever those weights change (`load_state_dict`,
`.to`, `train` / `eval`), as `PrepackedLinear` repacks its own copy.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb, eager_attention_forward

from specdec_core.models.prepacked_linear import PackedWeight

FUSED_ROWS = 16  # rows up to which a pass uses the fused projections (beams, commits)


class FusedProjections:
    """Several linears over the same input as one: `x -> (x @ W1.T + b1, x @ W2.T + b2, …)`,
    against one packed copy of their stacked weights, made here."""

    def __init__(self, *linears: nn.Module) -> None:
        weight = torch.cat([linear.weight.detach() for linear in linears])
        bias = None
        if any(linear.bias is not None for linear in linears):
            bias = torch.cat([
                linear.bias.detach()
                if linear.bias is not None
                else weight.new_zeros(linear.weight.shape[0])
                for linear in linears
            ])  # fmt: skip
        self.packed = PackedWeight(weight, bias)
        self.sizes = [linear.weight.shape[0] for linear in linears]

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.packed(x).split(self.sizes, dim=-1)


class LayerFusion:
    """The stacked projections of one decoder layer (its attention's q/k/v, its MLP's gate/up)."""

    def __init__(self, attn: nn.Module, mlp_module: nn.Module) -> None:
        self.qkv = FusedProjections(attn.q_proj, attn.k_proj, attn.v_proj)
        self.gate_up = FusedProjections(mlp_module.gate_proj, mlp_module.up_proj)


def attention(attn, fused: LayerFusion, x, mask, rope, cache) -> torch.Tensor:
    """transformers' `LlamaAttention`, q/k/v fused: [B, n, in] -> [B, n, h]. The attention
    itself is the function the layer's config names, as the Llama layer calls it."""
    batch, rows = x.shape[:2]
    shape = (batch, rows, -1, attn.head_dim)
    q, k, v = (t.view(shape).transpose(1, 2) for t in fused.qkv(x))
    cos, sin = rope
    q, k = apply_rotary_pos_emb(q, k, cos, sin)
    if cache is not None:
        k, v = cache.update(k, v, attn.layer_idx)
    interface = ALL_ATTENTION_FUNCTIONS.get_interface(
        attn.config._attn_implementation, eager_attention_forward
    )
    out, _ = interface(attn, q, k, v, mask, dropout=0.0, scaling=attn.scaling)
    return attn.o_proj(out.reshape(batch, rows, -1).contiguous())


def mlp(mlp_module, fused: LayerFusion, x: torch.Tensor) -> torch.Tensor:
    """transformers' `LlamaMLP`, gate and up fused."""
    gate, up = fused.gate_up(x)
    return mlp_module.down_proj(mlp_module.act_fn(gate) * up)


def decoder_layer(layer, fused: LayerFusion, hidden, mask, rope, cache) -> torch.Tensor:
    """transformers' `LlamaDecoderLayer` (pre-norm attention and MLP, residuals)."""
    x = hidden + attention(layer.self_attn, fused, layer.input_layernorm(hidden), mask, rope, cache)
    return x + mlp(layer.mlp, fused, layer.post_attention_layernorm(x))
