"""Turn logits into the distribution actually sampled from.

The same function is applied to the target's logits (p) and the drafter's logits (q), so that
temperature and top-p change both identically: the lossless rule then reproduces exactly the
distribution `sample(probs(target_logits))`.

At temperature 0 the distribution is the one-hot argmax (ties to the lowest id, as
`torch.argmax`), which makes "greedy" just the T → 0 case of the same rule.
"""

from __future__ import annotations

import torch

from specdec_core.decoding.config import is_greedy

TOP_P_CANDIDATES = 1024  # tokens ranked before top-p falls back to ranking all


def probs(logits: torch.Tensor, temperature: float, top_p: float = 1.0) -> torch.Tensor:
    """[..., V] logits -> [..., V] float32 probabilities after temperature and top-p."""
    logits = logits.float()
    if is_greedy(temperature):
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    p = torch.softmax(logits / temperature, dim=-1)
    if top_p < 1.0:
        p = _top_p(p, top_p)
    return p


def _top_p(p: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose mass reaches top_p (among equal
    probabilities the lower id first, as at temperature 0); renormalise.

    Only the most likely tokens can be kept, so the `TOP_P_CANDIDATES` largest are ranked
    first (a partial sort), and every token of a row only where its set would reach past them:
    a large vocabulary is not sorted for every row a step samples (docs/benchmarks.md). Both
    ways keep the same tokens with the same values: the candidates are the first places of
    the full ranking, so the mass before each is the same sum."""
    rows = p.reshape(-1, p.shape[-1])  # [n, V]
    if rows.shape[-1] <= TOP_P_CANDIDATES:
        return _renormalised(rows, *_nucleus(rows, _every(rows), top_p)).reshape(p.shape)
    ids = torch.topk(rows, TOP_P_CANDIDATES, dim=-1).indices.sort(dim=-1).values
    ranked, order, kept = _nucleus(rows, ids, top_p)
    nucleus = _renormalised(rows, ranked, order, kept)
    smallest_kept = ranked.masked_fill(~kept, float("inf")).amin(-1)
    mass_before_last = ranked.sum(-1) - ranked[:, -1]
    # every token past the candidates is no more likely than the last one and comes after at
    # least this mass: with room for rounding, none of them is kept; other rows rank them all
    flat = ~((smallest_kept > ranked[:, -1]) & (mass_before_last >= top_p + 1e-5))
    if bool(flat.any()):
        wide = rows[flat]
        nucleus[flat] = _renormalised(wide, *_nucleus(wide, _every(wide), top_p))
    return nucleus.reshape(p.shape)


def _every(rows: torch.Tensor) -> torch.Tensor:
    """Every token id, for each of `rows` [n, V]."""
    return torch.arange(rows.shape[-1], device=rows.device).expand_as(rows)


def _nucleus(p: torch.Tensor, ids: torch.Tensor, top_p: float):
    """-> (ranked, order, kept): p's tokens `ids` (ascending in each row) ranked by
    probability (descending, equal ones by id), their ids, and which are in the nucleus."""
    ranked, rank = torch.sort(p.gather(-1, ids), dim=-1, descending=True, stable=True)
    mass_before = ranked.cumsum(-1) - ranked  # mass of the tokens ranked before
    return ranked, ids.gather(-1, rank), mass_before < top_p


def _renormalised(p, ranked, order, kept) -> torch.Tensor:
    nucleus = torch.zeros_like(p).scatter(-1, order, ranked.masked_fill(~kept, 0.0))
    return nucleus / nucleus.sum(-1, keepdim=True)


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
