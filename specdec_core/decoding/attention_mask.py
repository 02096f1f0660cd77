"""Additive attention masks: the one place a "may attend" matrix becomes what a model adds.

In: a boolean matrix `allowed` [q, kv] (True = query row q may attend to key column kv), a
dtype and a device. Out: a float mask [1, 1, q, kv] in that dtype on that device, 0 where
allowed and `torch.finfo(dtype).min` where not, as transformers' Llama layers and the EAGLE
head take it (`attention_mask=`, added to the attention scores before the softmax).

Two shapes build on it: `causal` (new rows after a cache: the whole cache and the earlier new
rows) and `after_prefix` (drafted rows after a cached prefix: the whole prefix plus the drafted
rows each one sees; a tree's ancestors, or a training unroll's own chain). Callers keep every
row allowing at least one column (itself), so no softmax is over nothing. The decode loop that
uses them: docs/architecture.md.
"""

from __future__ import annotations

import torch


def additive(allowed: torch.Tensor, dtype: torch.dtype, device=None) -> torch.Tensor:
    """[q, kv] bool -> [1, 1, q, kv] additive mask in `dtype` on `device` (default: allowed's).

    Built where `allowed` lies, then moved: a mask built on the CPU crosses to the device once.
    """
    mask = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    mask = mask.masked_fill(~allowed, torch.finfo(dtype).min)[None, None]
    return mask if device is None else mask.to(device)


def causal(n: int, past: int, dtype: torch.dtype, device) -> torch.Tensor:
    """[1, 1, n, past + n]: every new row sees the `past` cached rows, earlier new rows, itself."""
    allowed = torch.ones(n, past + n, dtype=torch.bool, device=device).tril(diagonal=past)
    return additive(allowed, dtype)


def after_prefix(seen: torch.Tensor, prefix: int, dtype: torch.dtype, device) -> torch.Tensor:
    """[1, 1, k, prefix + r] from `seen` [k, r]: all of the cached prefix, plus the seen rows."""
    ones = torch.ones(seen.shape[0], prefix, dtype=torch.bool, device=seen.device)
    return additive(torch.cat([ones, seen], dim=1), dtype, device)
