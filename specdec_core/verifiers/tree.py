"""Lossless verification of a draft tree (EAGLE-2's sibling-wise rule).

Tree drafts are treated as deterministic (q = 1 for the drafted token). Starting at the root,
try the children of the current node in order: accept child x with probability p(x); on
rejection set p(x) = 0, renormalise, and try the next sibling. If a child is accepted, descend
into it; if all are rejected, sample the residual p. The emitted token sequence is then
distributed exactly as sampling from the target alone (each step is rejection sampling
without replacement against one-hot proposals). At temperature 0 p is one-hot, so this is
"follow the child equal to the target's argmax".
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
    children: dict[int, list[int]] = {}
    for node, parent in enumerate(proposal.parents):
        children.setdefault(parent, []).append(node)
    path: list[int] = []
    node = -1
    while True:
        dist = p[node + 1].clone()  # [V]
        for child in children.get(node, []):
            x = proposal.tokens[child]
            u = torch.rand((), generator=generator, device=dist.device)
            rest = dist.sum() - dist[x]  # 0 only if rounding left p(x) just under 1
            if u < dist[x] or rest <= 0:
                path.append(child)
                node = child
                break
            dist[x] = 0.0
            dist = dist / rest
        else:
            return path, sample(dist, generator)
