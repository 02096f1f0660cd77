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

`fused` is the layer's `LayerFusion`, which rebuilds its stacked copies whenever a source
weight changes (training, `load_state_dict`, `.to`).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb, eager_attention_forward

from specdec_core.prepacked_linear import PackedWeight, tensor_stamp

FUSED_ROWS = 16  # rows up to which a pass uses the fused projections (beams, commits)


class FusedProjections:
    """Several linears over the same input as one: `x -> (x @ W1.T + b1, x @ W2.T + b2, …)`."""

    def __init__(self, *linears: nn.Module) -> None:
        self.linears = linears
        self.packed: PackedWeight | None = None
        self._stamp: tuple = ()

    def _stamps(self) -> tuple:
        return tuple(
            (*tensor_stamp(linear.weight), *tensor_stamp(linear.bias)) for linear in self.linears
        )

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        stamp = self._stamps()
        if self.packed is None or stamp != self._stamp:
            weight = torch.cat([linear.weight.detach() for linear in self.linears])
            biases = [linear.bias for linear in self.linears]
            bias = None
            if any(b is not None for b in biases):
                bias = torch.cat([
                    b.detach() if b is not None else weight.new_zeros(linear.weight.shape[0])
                    for b, linear in zip(biases, self.linears, strict=True)
                ])  # fmt: skip
            self.packed, self._stamp = PackedWeight(weight, bias), stamp
        sizes = [linear.weight.shape[0] for linear in self.linears]
        return self.packed(x).split(sizes, dim=-1)


class LayerFusion:
    """The stacked projections of one decoder layer (its attention's q/k/v, its MLP's gate/up)."""

    def __init__(self, attn: nn.Module, mlp_module: nn.Module) -> None:
        self.qkv = FusedProjections(attn.q_proj, attn.k_proj, attn.v_proj)
        self.gate_up = FusedProjections(mlp_module.gate_proj, mlp_module.up_proj)

    def serves(self, attn: nn.Module, mlp_module: nn.Module) -> bool:
        """Are these the fusions of exactly these modules' linears (none replaced since)?"""
        return self.qkv.linears == (attn.q_proj, attn.k_proj, attn.v_proj) and (
            self.gate_up.linears == (mlp_module.gate_proj, mlp_module.up_proj)
        )


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
