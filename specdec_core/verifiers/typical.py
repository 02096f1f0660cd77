"""Typical acceptance (Medusa, Cai et al. 2024, §2.3.1) (lossy).

Accept drafted x_i while π_i(x_i) > min(ε, δ · exp(−H(π_i))), with H the entropy of the
target's distribution at that position: a confident target (low H) demands a likely token, an
uncertain one accepts more.

Parameters (`--policy-param`): `epsilon` (ε, default 0.09, Medusa's posterior threshold) and
`delta` (δ, default 0.3, Medusa's α = √ε). ε = 0 accepts every drafted token of non-zero
probability. π is the target's softmax (see `verifiers.lossy`); Medusa uses the temperature-
scaled softmax as well.
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


class TypicalVerifier(ScoringPolicy):
    name = "typical"
    PARAMS = {"epsilon": 0.09, "delta": 0.3}

    def approve(self, draft: torch.Tensor, q: torch.Tensor, pi: torch.Tensor) -> torch.Tensor:
        return typical_approve(draft, pi, self.params["epsilon"], self.params["delta"])
