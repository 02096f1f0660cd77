"""Lossless verification of a draft tree: recursive rejection sampling over siblings.

At each node the target's distribution r = p(· | path so far) is tried against the node's
children in the order they were drafted. A child x drafted from a distribution q is accepted
with probability min(1, r(x) / q(x)); on rejection r becomes norm(max(0, r − q)) and the next
child is tried; if a child is accepted the walk descends into it, and if all are rejected the
next token is a sample of r. Every step is the speculative-sampling step of the lossless chain
rule, and the children were drafted independently of the target, so the emitted tokens are
distributed exactly as sampling from the target alone (SpecInfer's multi-step speculative
sampling, Miao et al. 2024).

Two kinds of children (`Proposal` in drafters/base.py):
- deterministic (`draws` None, or a child with a one-hot q row: EAGLE-2's top-k, a lookup
  chain): q is one-hot, so accept x with probability r(x), else set r(x) = 0 and renormalise
  (EAGLE-2's sibling-wise rule). At temperature 0 r is one-hot: "follow the child equal to the
  target's argmax".
- sampled (`draws` lists node indices in the order they were drawn, i.i.d. from the parent's
  q; a token drawn twice is one node tried twice): accept with min(1, r(x) / q(x)), which at
  T > 0 takes a draft far more often than r(x) when the head's q is close to the target's.
"""

from __future__ import annotations

import torch

from specdec_core.errors import SpecdecError
from specdec_core.sampling import sample


def verify_tree(
    proposal, p: torch.Tensor, generator: torch.Generator | None, verifier
) -> tuple[list[int], int]:
    """`p`: [n+1, V], row 0 = root (pending token), row i+1 = after node i.

    Returns the accepted node indices from the root down, and the next token.
    """
    if verifier.lossy:
        raise SpecdecError(
            f"policy '{verifier.name}' works on chains only; use --policy lossless with tree "
            "methods, or a chain method (--method eagle / classic / ngram)"
        )
    order = proposal.draws if proposal.draws is not None else range(len(proposal.tokens))
    children: dict[int, list[int]] = {}
    for node in order:
        children.setdefault(proposal.parents[node], []).append(node)
    sampled = proposal.draws is not None
    path: list[int] = []
    node = -1
    while True:
        dist = p[node + 1].clone()  # [V] r: the target's distribution, then its residuals
        for child in children.get(node, []):
            x = proposal.tokens[child]
            q = proposal.q[child] if sampled else None  # [V]; None: one-hot on x
            q_x = q[x] if q is not None else 1.0
            u = torch.rand((), generator=generator, device=dist.device)
            accepted = u * q_x < dist[x]
            if not accepted:
                if q is None:
                    residual = dist.clone()
                    residual[x] = 0.0
                else:
                    residual = (dist - q).clamp(min=0.0)
                rest = residual.sum()
                accepted = rest <= 0  # only if r <= q everywhere, i.e. r = q up to rounding
            if accepted:
                path.append(child)
                node = child
                break
            dist = residual / rest
        else:
            return path, sample(dist, generator)
