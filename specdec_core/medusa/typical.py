"""Medusa's typical acceptance on a draft tree (Cai et al. 2024, §2.3.1) (lossy).

A drafted node x (a child of the node whose row is π) is typical when
π(x) > min(ε, δ · exp(−H(π))), the rule of the chain policy `verifiers/typical.py`
(`typical_approve`), with π the target's distribution the policy scores (`verifiers.lossy`:
p at T > 0, softmax at T = 1 when decoding greedily). Medusa takes, among the paths whose
every node is typical, the longest, ties to the highest Σ log π along the path; the
next token is drawn from π at the end of that path with the path's refused children removed
(the lossless rule's residual for one-hot drafts, as the chain policies do: at T = 0 the
argmax). Nothing here is exact: it trades the target's distribution for longer accepted paths.

`verify_typical_tree` takes the tree's proposal and returns (accepted node indices, next token),
what `verifiers/tree.py` returns for the lossless rule; p is the distribution the next token is
drawn from (sampling.probs) and π the one scored.
"""

from __future__ import annotations

import torch

from specdec_core.sampling import sample
from specdec_core.verifiers.typical import typical_approve

EPSILON, DELTA = 0.09, 0.3  # Medusa's posterior_threshold and posterior_alpha (= √ε)


def typical_nodes(
    tokens: list[int], parents: tuple[int, ...], pi: torch.Tensor, epsilon: float, delta: float
) -> list[bool]:
    """Per node: is it typical under its parent's row of π ([n+1, V], row 0 the root)?"""
    if not tokens:
        return []
    rows = pi[[parent + 1 for parent in parents]]  # [n, V]: each node's parent's row
    draft = torch.tensor(tokens, device=pi.device)
    return typical_approve(draft, rows, epsilon, delta).tolist()


def typical_path(
    tokens: list[int],
    parents: tuple[int, ...],
    pi: torch.Tensor,
    epsilon: float = EPSILON,
    delta: float = DELTA,
) -> list[int]:
    """The accepted node indices, root down: the deepest node whose path is typical throughout,
    ties to the highest summed log π (nodes are listed parents first)."""
    approved = typical_nodes(tokens, parents, pi, epsilon, delta)
    depth: list[int] = []
    score: list[float] = []
    best: tuple[int, float, int] = (0, 0.0, -1)  # (depth, score, node); the root by default
    for node, parent in enumerate(parents):
        reach = approved[node] and (parent < 0 or depth[parent] > 0)
        logp = float(pi[parent + 1, tokens[node]].clamp(min=1e-30).log())
        depth.append(depth[parent] + 1 if parent >= 0 and reach else int(reach))
        score.append((score[parent] if parent >= 0 else 0.0) + logp)
        if reach and (depth[node], score[node]) > best[:2]:
            best = (depth[node], score[node], node)
    path, node = [], best[2]
    while node >= 0:
        path.append(node)
        node = parents[node]
    return path[::-1]


def verify_typical_tree(
    proposal,
    p: torch.Tensor,
    pi: torch.Tensor,
    generator: torch.Generator | None,
    epsilon: float = EPSILON,
    delta: float = DELTA,
) -> tuple[list[int], int]:
    """(accepted node indices, next token) for a tree `proposal` (drafters/base.py) by typical
    acceptance; `p` [n+1, V] the target's distribution per row (next tokens come from it), `pi`
    [n+1, V] the one scored."""
    path = typical_path(proposal.tokens, proposal.parents, pi, epsilon, delta)
    last = path[-1] if path else -1
    dist = p[last + 1].clone()
    refused = [proposal.tokens[c] for c, parent in enumerate(proposal.parents) if parent == last]
    if refused:
        rest = dist.clone()
        rest[refused] = 0.0
        if rest.sum() > 0:
            dist = rest / rest.sum()
    return path, sample(dist, generator)
