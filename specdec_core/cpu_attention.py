"""SDPA attention for CPU models: grouped-query heads stay grouped inside torch's kernel.

transformers' `sdpa` attention hands grouped-query attention (GQA: SmolLM2 has 9 query heads
over 3 key/value heads) to torch's kernel only when there is no attention mask, because CUDA
kernels fall back to slow paths with one. Otherwise it first copies the key/value cache once
per query head (`repeat_kv`, the whole cache, every layer). Every multi-token forward after a
cached prefix has a mask, and that is exactly what speculative decoding verifies (chains and
trees alike). On a CPU torch's kernel takes grouped heads and a mask together (`enable_gqa`).
The outputs are bitwise equal and multi-token forwards are faster
(docs/benchmarks.md#step-costs-on-the-cpu).

`use_grouped_sdpa(model)` registers this function with transformers' `AttentionInterface`
(and the sdpa mask builder under the same name) and switches a CPU model to it; every other
case, including forwards without a mask, goes to transformers' own `sdpa` function.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F
from transformers import AttentionInterface, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "specdec_grouped_sdpa"


def grouped_sdpa_forward(
    module: torch.nn.Module,
    query: torch.Tensor,  # [B, heads, q, d]
    key: torch.Tensor,  # [B, kv_heads, kv, d]
    value: torch.Tensor,  # [B, kv_heads, kv, d]
    attention_mask: torch.Tensor | None,  # [B, 1, q, kv] (additive or boolean)
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    grouped = getattr(module, "num_key_value_groups", 1) > 1
    if attention_mask is None or not grouped or kwargs.get("position_bias") is not None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs
        )
    out = F.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling,
        enable_gqa=True,
    )  # fmt: skip
    return out.transpose(1, 2).contiguous(), None  # [B, q, heads, d]


def use_grouped_sdpa(model: torch.nn.Module) -> bool:
    """Switch a CPU model (or an EAGLE head: anything with a Llama-style `config`) that uses
    sdpa to the grouped kernel; returns whether it did."""
    config = getattr(model, "config", None)
    device = next(model.parameters()).device
    if config is None or device.type != "cpu" or config._attn_implementation != "sdpa":
        return False
    AttentionInterface.register(NAME, grouped_sdpa_forward)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    if isinstance(model, PreTrainedModel):
        model.set_attn_implementation(NAME)
    else:
        config._attn_implementation = NAME
    return True
