"""Typical acceptance (Medusa, Cai et al. 2024, §2.3.1) (lossy).

Accept drafted x_i while π_i(x_i) > min(ε, δ · exp(−H(π_i))), with H the entropy of the
target's distribution at that position: a confident target (low H) demands a likely token, an
uncertain one accepts more.

Parameters (`--policy-param`): `epsilon` (ε, default 0.09, Medusa's posterior threshold) and
`delta` (δ, default 0.3, Medusa's α = √ε). ε = 0 accepts every drafted token of non-zero
probability. π is the target's softmax (see `verifiers.lossy`); Medusa uses the temperature-
scaled softmax as well.

On a tree the policy is applied path by path like every lossy policy (verifiers/tree.py).
`typical_path` is Medusa's own rule on a tree (Cai et al. 2024, §2.3.1): among the paths whose
every node is typical under its parent's row, the deepest, ties to the highest Σ log π.
"""

from __future__ import annotations

import torch

from specdec_core.verifiers.lossy import ScoringPolicy, drafted_probs


def entropy(pi: torch.Tensor) -> torch.Tensor:
    """H(π) in nats per row, [k] from [k, V] (0 · log 0 = 0)."""
    return -(pi * pi.clamp(min=1e-30).log()).sum(-1)


def typical_approve(
    draft: torch.Tensor, pi: torch.Tensor, epsilon: float, delta: float
) -> torch.Tensor:
    """[k] bool: π_i(x_i) > min(ε, δ · exp(−H(π_i)))."""
    bound = torch.clamp(delta * torch.exp(-entropy(pi)), max=epsilon)  # [k]
    return drafted_probs(draft, pi) > bound


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


class TypicalVerifier(ScoringPolicy):
    name = "typical"
    PARAMS = {"epsilon": EPSILON, "delta": DELTA}

    def approve(self, draft: torch.Tensor, q: torch.Tensor, pi: torch.Tensor) -> torch.Tensor:
        return typical_approve(draft, pi, self.params["epsilon"], self.params["delta"])
