"""SDPA attention for CPU models: grouped-query heads stay grouped inside torch's kernel.

transformers' `sdpa` attention hands grouped-query attention (GQA: SmolLM2 has 9 query heads
over 3 key/value heads) to torch's kernel only when there is no attention mask, because CUDA
kernels fall back to slow paths with one. Otherwise it first copies the key/value cache once
per query head (`repeat_kv`, the whole cache, every layer). Every multi-token forward after a
cached prefix has a mask, and that is exactly what speculative decoding verifies (chains and
trees alike). On a CPU torch's kernel takes grouped heads and a mask together (`enable_gqa`).
The outputs are bitwise equal and multi-token forwards are faster
(docs/benchmarks.md#step-costs-on-the-cpu).

In bf16 (or fp16) a verify forward also gives each row the bits a one-token `ar` step gives
it (`path_attention`). torch's CPU kernel rounds a row differently when the call has more
query rows or masked keys, and in bf16 that flips greedy near-ties, so speculative output
drifts from `ar`'s. The kernel is invariant to the batch size, though, so each row attends as
its own batch element over exactly the keys it sees (its path: the prefix, its ancestors,
itself; gathered in position order), with no mask, as `ar` does at that position (a one-token
step under a mask, a sliding window's, gathers the same way). Rows seeing the same number of
keys share one call. Up to `PATH_ROWS` rows (trees, chains); longer forwards (a prompt after a
cached turn) keep the masked call, the same in `ar` and speculative runs.
Measured: docs/benchmarks.md#bfloat16-verification-with-ars-bits.

A batched generation step (many sequences, one new token each, under their padding mask) in
reduced precision attends by two matrix products instead (`batched_step_attention`): torch's
CPU kernel takes 3.3 ms for a bf16 layer of 64 rows over 100 keys where the products take
0.3 (14 against 1.1 ms over 400 keys), which made the kernel most of a step of a training-data
generation job. Its bits are not the kernel's: the scores are rounded to bf16 before a float32
softmax, an error about twice the kernel's (docs/eagle.md#generation-speed-on-a-cpu); nothing
compares such a step's bits with anything, and single-sequence forwards (every decoding method)
never take this path.

`use_grouped_sdpa(model, rows_like_ar=...)` registers these functions with transformers'
`AttentionInterface` (and the sdpa mask builder under the same names) and switches a CPU model
to one: targets (and drafts, loaded alike) attend row by row in reduced precision (`PATH_NAME`),
EAGLE heads only grouped (`NAME`: a head's bits need not match anything, and the masked call is
cheaper). Every other case, including forwards without a mask, goes to transformers' own
`sdpa` function.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F
from transformers import AttentionInterface, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "specdec_grouped_sdpa"
PATH_NAME = "specdec_path_sdpa"  # grouped, and row by row in reduced precision
PATH_ROWS = 64  # query rows up to which a reduced-precision forward attends row by row
REDUCED = (torch.bfloat16, torch.float16)
# arguments some models pass that change what attention computes (a bias, soft-capping,
# attention sinks): a forward with any of them keeps torch's kernel
CHANGES_ATTENTION = ("position_bias", "softcap", "s_aux")
ROW_GROUPS = "row_groups"  # the keyword a forward passes its attention calls (`RowGroups`)


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
    if is_batched_step(query, attention_mask, dropout, kwargs):
        return batched_step_attention(query, key, value, attention_mask, scaling), None
    grouped = getattr(module, "num_key_value_groups", 1) > 1
    if attention_mask is None or not grouped or changes_attention(kwargs):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs
        )
    out = F.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling,
        enable_gqa=True,
    )  # fmt: skip
    return out.transpose(1, 2).contiguous(), None  # [B, q, heads, d]


def changes_attention(kwargs: dict) -> bool:
    """Does the call pass an argument that changes what attention computes (CHANGES_ATTENTION)?"""
    return any(kwargs.get(name) is not None for name in CHANGES_ATTENTION)


def reduced_cpu_inference(
    query: torch.Tensor, mask: torch.Tensor | None, dropout: float, kwargs: dict
) -> bool:
    """What every row-by-row fast path asks of a call: reduced precision on the CPU, under a
    mask, no dropout, no gradients, nothing that changes what attention computes."""
    return (
        query.dtype in REDUCED
        and query.device.type == "cpu"
        and mask is not None
        and dropout == 0.0
        and not changes_attention(kwargs)
        and not torch.is_grad_enabled()
    )


def is_batched_step(
    query: torch.Tensor, mask: torch.Tensor | None, dropout: float, kwargs: dict
) -> bool:
    """A reduced-precision CPU forward of several sequences, one query row each, under a mask
    (a batched `generate` step), with nothing `batched_step_attention` does not do."""
    return (
        reduced_cpu_inference(query, mask, dropout, kwargs)
        and query.shape[0] > 1
        and query.shape[2] == 1
    )


def batched_step_attention(
    query: torch.Tensor,  # [B, heads, 1, d]
    key: torch.Tensor,  # [B, kv_heads, kv, d]
    value: torch.Tensor,  # [B, kv_heads, kv, d]
    mask: torch.Tensor,  # [B, 1, 1, kv] (additive or boolean)
    scaling: float | None,
) -> torch.Tensor:
    """One query row per sequence by two matrix products, the query heads of a key/value head
    side by side as rows; softmax in float32: [B, 1, heads, d]."""
    batch, heads, _, dim = query.shape
    kv_heads = key.shape[1]
    scale = dim**-0.5 if scaling is None else scaling
    grouped = (query * scale).view(batch, kv_heads, heads // kv_heads, dim)
    scores = torch.matmul(grouped, key.transpose(-1, -2)).float()  # [B, kv_heads, g, kv]
    if mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask, float("-inf"))
    else:
        scores = scores + mask.float()
    weights = torch.softmax(scores, dim=-1).to(value.dtype)
    out = torch.matmul(weights, value)  # [B, kv_heads, g, d_v]
    return out.view(batch, heads, 1, value.shape[3]).transpose(1, 2).contiguous()


def path_sdpa_forward(
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
    """`grouped_sdpa_forward`, but a reduced-precision forward of up to PATH_ROWS rows under
    a mask attends row by row (`path_attention`), with the bits of one-token steps. The
    forward's `RowGroups` (keyword ROW_GROUPS) groups each mask's rows once for all layers."""
    memo: RowGroups | None = kwargs.pop(ROW_GROUPS, None)
    if (
        reduced_cpu_inference(query, attention_mask, dropout, kwargs)
        and attention_mask.shape[1] == 1
        and tuple(attention_mask.shape[-2:]) == (query.shape[2], key.shape[2])
        and query.shape[2] <= PATH_ROWS
        and query.shape[0] == 1
    ):
        groups = memo.of(attention_mask) if memo is not None else row_groups(attention_mask)
        if groups is not None:
            grouped = getattr(module, "num_key_value_groups", 1) > 1
            return path_attention(query, key, value, groups, scaling, grouped), None
    return grouped_sdpa_forward(
        module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs
    )


# query rows, how many first keys they all see, the later keys each sees [r, t] (None: none)
Group = tuple[slice | torch.Tensor, int, torch.Tensor | None]


class RowGroups:
    """The row groups of the masks one forward's layers share (one mask, or two kinds of
    layer's in a model with sliding windows), each grouped once: a fresh one per forward,
    passed as the keyword ROW_GROUPS (`forward_keywords`)."""

    def __init__(self) -> None:
        self._seen: list[tuple[torch.Tensor, list[Group] | None]] = []

    def of(self, mask: torch.Tensor) -> list[Group] | None:
        for seen, groups in self._seen:
            if seen is mask:
                return groups
        groups = row_groups(mask)
        self._seen.append((mask, groups))
        return groups


def forward_keywords(model: PreTrainedModel) -> dict[str, RowGroups]:
    """What a forward of `model` passes its attention calls: a fresh `RowGroups` where it
    attends row by row (PATH_NAME, reduced precision), nothing otherwise."""
    if model.config._attn_implementation == PATH_NAME and model.dtype in REDUCED:
        return {ROW_GROUPS: RowGroups()}
    return {}


def row_groups(mask: torch.Tensor) -> list[Group] | None:
    """The rows of a [1, 1, q, kv] mask grouped by how many keys they see, each group with
    its keys in position order: (rows, p, later keys [r, t]) where all of them see the first
    p keys, or (rows, c, None) where they see exactly the first c (a view of the cache,
    nothing copied). None for a mask that adds values other than 0 and −inf (a bias) or hides
    every key from a row, which `path_attention` leaves to the masked call."""
    additive = mask[0, 0]
    if additive.dtype == torch.bool:
        allowed = additive
    else:
        allowed = additive == 0
        if bool((additive[~allowed] > torch.finfo(additive.dtype).min).any()):
            return None
    counts = allowed.sum(-1)
    if not bool(counts.all()):  # a row that sees no key (padding): the masked call's business
        return None
    leading = allowed.int().cumprod(-1).sum(-1)  # how many of the first keys each row sees
    groups: list[Group] = []
    for count in counts.unique().tolist():  # one attention call per key count
        members = (counts == count).nonzero()[:, 0]
        first = int(leading[members].min())
        rows = _as_slice(members)
        if first == count:  # rows that see exactly the first keys
            groups.append((rows, count, None))
            continue
        later = allowed[members, first:].nonzero()[:, 1].view(len(members), count - first)
        groups.append((rows, first, later + first))
    return groups


def _as_slice(members: torch.Tensor) -> slice | torch.Tensor:
    """Consecutive row indices (a tree level, a chain row) as a slice: views, not copies."""
    start, stop = int(members[0]), int(members[-1]) + 1
    return slice(start, stop) if stop - start == len(members) else members


def _path_keys(states: torch.Tensor, first: int, later: torch.Tensor) -> torch.Tensor:
    """[1, kv_heads, kv, d] -> [r, kv_heads, first + t, d]: the first keys, then each row's."""
    rows = later.shape[0]
    out = states.new_empty(rows, states.shape[1], first + later.shape[1], states.shape[3])
    out[:, :, :first] = states[:, :, :first]
    out[:, :, first:] = states[0][:, later].transpose(0, 1)
    return out


def path_attention(
    query: torch.Tensor,  # [1, heads, q, d]
    key: torch.Tensor,  # [1, kv_heads, kv, d]
    value: torch.Tensor,  # [1, kv_heads, kv, d]
    groups: list[Group],
    scaling: float | None,
    grouped: bool,
) -> torch.Tensor:
    """Each query row over its own keys as a batch element, unmasked: [1, q, heads, d]."""
    out = query.new_empty(query.shape[1], query.shape[2], value.shape[3])  # [heads, q, d_v]
    for rows, first, later in groups:
        q = query[0][:, rows].transpose(0, 1).unsqueeze(2)  # [r, heads, 1, d]
        if later is None:  # the first keys only: a view of the cache as it stands
            k = key[:, :, :first].expand(q.shape[0], -1, -1, -1)
            v = value[:, :, :first].expand(q.shape[0], -1, -1, -1)
        else:
            k, v = _path_keys(key, first, later), _path_keys(value, first, later)
        o = F.scaled_dot_product_attention(q, k, v, scale=scaling, enable_gqa=grouped)
        out[:, rows] = o[:, :, 0].transpose(0, 1)
    return out.unsqueeze(0).transpose(1, 2).contiguous()


def use_grouped_sdpa(model: torch.nn.Module, rows_like_ar: bool = False) -> bool:
    """Switch a CPU model (or an EAGLE head: anything with a Llama-style `config`) that uses
    sdpa to the grouped kernel, and with `rows_like_ar` (a target) to row-by-row attention in
    reduced precision too; returns whether it did."""
    config = getattr(model, "config", None)
    device = next(model.parameters()).device
    if config is None or device.type != "cpu" or config._attn_implementation != "sdpa":
        return False
    for name, forward in ((NAME, grouped_sdpa_forward), (PATH_NAME, path_sdpa_forward)):
        AttentionInterface.register(name, forward)
        AttentionMaskInterface.register(name, sdpa_mask)
    name = PATH_NAME if rows_like_ar else NAME
    if isinstance(model, PreTrainedModel):
        model.set_attn_implementation(name)
    else:
        config._attn_implementation = name
    return True
