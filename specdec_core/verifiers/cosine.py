"""Logits-similarity policy (lossy): accept x_i while cos(q_i, π_i) ≥ τ.

cos(q, π) = q·π / (‖q‖ ‖π‖), the cosine similarity of the draft and target distributions at
the drafted position (both non-negative, so cos ∈ [0, 1]).

Parameters (`--policy-param`): `tau` (default 0.5). τ = 0 accepts every drafted token; τ = 1
accepts only where the two distributions are proportional.

A deterministic drafter (n-gram) and every drafter at T = 0 give a one-hot q, where the rule
reads π(x)/‖π‖₂ ≥ τ: a threshold on the drafted token scaled by how peaked π is. π is the
target's softmax (see `verifiers.lossy`).
"""

from __future__ import annotations

import torch

from specdec_core.verifiers.lossy import ScoringPolicy


def cosine_approve(q: torch.Tensor, pi: torch.Tensor, tau: float) -> torch.Tensor:
    """[k] bool: cosine similarity of q_i and π_i ≥ τ."""
    return torch.nn.functional.cosine_similarity(q, pi, dim=-1) >= tau


class CosineVerifier(ScoringPolicy):
    name = "cosine"
    PARAMS = {"tau": 0.5}

    def approve(self, draft: torch.Tensor, q: torch.Tensor, pi: torch.Tensor) -> torch.Tensor:
        return cosine_approve(q, pi, self.params["tau"])
