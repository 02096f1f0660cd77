"""Lossless verification of a draft tree: recursive rejection sampling over siblings.

At each node the target's distribution r = p(· | path so far) is tried against the node's
children in the order they were drafted. A child x drafted from a distribution q is accepted
with probability min(1, r(x) / q(x)); on rejection r becomes norm(max(0, r − q)) and the next
child is tried; if a child is accepted the walk descends into it, and if all are rejected the
next token is a sample of r. Every step is the speculative-sampling step of the lossless chain
rule, and the children were drafted independently of the target, so the emitted tokens are
distributed exactly as sampling from the target alone (SpecInfer's multi-step speculative
sampling, Miao et al. 2024).

Two kinds of children (`Proposal`, decoding/proposal.py):
- deterministic (`draws` None, or a child with a one-hot q row: EAGLE-2's top-k, a lookup
  chain): q is one-hot, so accept x with probability r(x), else set r(x) = 0 and renormalise
  (EAGLE-2's sibling-wise rule). At temperature 0 r is one-hot: "follow the child equal to the
  target's argmax".
- sampled (`draws` lists node indices in the order they were drawn, i.i.d. from the parent's
  q; a token drawn twice is one node tried twice): accept with min(1, r(x) / q(x)), which at
  T > 0 takes a draft far more often than r(x) when the head's q is close to the target's.

**Lossy policies** (`verifier.lossy`) are applied path by path: every root-to-leaf path is
verified as a chain by the policy's own `verify` (its drafted tokens, their q rows — the tree's
q rows for a sampled tree, one-hot otherwise — the rows of p and π that score them, and the row
after the leaf for the bonus token). The accepted path is the longest accepted prefix among the
paths, ties to the first path in the order the lossless rule tries children (depth first,
children in drafting order); the next token is the one the policy gives for that path. Every
path is verified from the same random state, so a node shared by two paths sits at the same
depth of both and gets the same uniform draw where a policy draws one per drafted token (torch
fills uniform draws in order); afterwards the generator is left as the chosen path's
verification left it. A tree with one path is therefore verified exactly as the chain rule
verifies that chain, random draws included.
"""

from __future__ import annotations

import torch

from specdec_core.decoding.sampling import sample
from specdec_core.verifiers.base import Verdict


def verify_tree(
    proposal,
    p: torch.Tensor,
    generator: torch.Generator | None,
    verifier,
    p_soft: torch.Tensor | None = None,
) -> tuple[list[int], int]:
    """`p`: [n+1, V], row 0 = root (pending token), row i+1 = after node i; `p_soft` the same
    rows of π for a policy that `needs_soft_p` (lossy policies only; None: they score p).

    Returns the accepted node indices from the root down, and the next token.
    """
    if verifier.lossy:
        return verify_paths(proposal, p, generator, verifier, p_soft)
    children = proposal.children()
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


def tree_paths(proposal) -> list[list[int]]:
    """Root-to-leaf node paths, depth first, children in the order the lossless rule tries
    them (`draws` order for a sampled tree, a node drawn twice listed once); [[]] for no nodes."""
    children = proposal.children(distinct=True)
    paths: list[list[int]] = []
    stack: list[list[int]] = [[]]
    while stack:
        path = stack.pop()
        below = children.get(path[-1] if path else -1, [])
        if not below:
            paths.append(path)
        stack.extend([*path, child] for child in reversed(below))
    return paths


def verify_paths(proposal, p, generator, verifier, p_soft=None) -> tuple[list[int], int]:
    """A lossy chain policy on a tree: the longest accepted path prefix, and its next token
    (the arguments as `verify_tree`'s)."""
    if generator is None:  # a generator of its own, seeded from torch's global one
        seed = int(torch.randint(2**62, ()))
        generator = torch.Generator(device=p.device).manual_seed(seed)
    start = generator.get_state()
    best: tuple[list[int], Verdict, torch.Tensor] | None = None
    for path in tree_paths(proposal):
        generator.set_state(start)
        rows = [0, *(node + 1 for node in path)]  # the rows scoring each node, then the bonus
        tokens = [proposal.tokens[node] for node in path]
        draft = torch.tensor(tokens, dtype=torch.long, device=p.device)
        q = proposal.q[path] if proposal.draws is not None else None  # [len, V] or one-hot
        soft = p_soft[rows] if p_soft is not None else None
        verdict = verifier.verify(draft, q, p[rows], generator, p_soft=soft)
        if best is None or verdict.accepted > best[1].accepted:
            best = (path, verdict, generator.get_state())
    path, verdict, end = best
    generator.set_state(end)
    return path[: verdict.accepted], verdict.next_token
