"""Turn logits into the distribution actually sampled from.

The same function is applied to the target's logits (p) and the drafter's logits (q), so that
temperature and top-p change both identically: the lossless rule then reproduces exactly the
distribution `sample(probs(target_logits))`.

At temperature 0 the distribution is the one-hot argmax (ties to the lowest id, as
`torch.argmax`), which makes "greedy" just the T → 0 case of the same rule.
"""

from __future__ import annotations

import torch


def probs(logits: torch.Tensor, temperature: float, top_p: float = 1.0) -> torch.Tensor:
    """[..., V] logits -> [..., V] float32 probabilities after temperature and top-p."""
    logits = logits.float()
    if temperature <= 0.0:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    p = torch.softmax(logits / temperature, dim=-1)
    if top_p < 1.0:
        p = _top_p(p, top_p)
    return p


def _top_p(p: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose mass reaches top_p; renormalise."""
    sorted_p, order = torch.sort(p, dim=-1, descending=True)
    mass_before = sorted_p.cumsum(-1) - sorted_p  # mass of strictly more likely tokens
    sorted_p = sorted_p.masked_fill(mass_before >= top_p, 0.0)
    kept = torch.zeros_like(p).scatter(-1, order, sorted_p)
    return kept / kept.sum(-1, keepdim=True)


def sample(p: torch.Tensor, generator: torch.Generator | None) -> int:
    """Draw one token id from a [V] distribution (p >= 0, any positive total)."""
    return sample_many(p, 1, generator)[0]


def sample_many(p: torch.Tensor, n: int, generator: torch.Generator | None) -> list[int]:
    """Draw n independent token ids from a [V] distribution (with replacement).

    Inverse CDF, one uniform number per draw: the first id whose cumulative mass exceeds
    u * total. A zero-probability id never has a cumulative mass above its predecessor's, so
    it is never drawn. (`torch.multinomial` draws V exponential numbers instead, many times
    slower at V = 49k on a CPU, paid by every decode step: docs/benchmarks.md.)
    """
    wide = torch.float32 if p.device.type == "mps" else torch.float64  # MPS has no float64
    cdf = p.to(wide).cumsum(-1)
    u = torch.rand(n, generator=generator, device=p.device, dtype=wide) * cdf[-1]
    tokens = torch.searchsorted(cdf, u, right=True).tolist()
    last = None  # u * total rounded up to the total: the last id with mass
    for i, token in enumerate(tokens):
        if token >= p.shape[-1]:
            last = int(p.nonzero()[-1, 0]) if last is None else last
            tokens[i] = last
    return tokens
