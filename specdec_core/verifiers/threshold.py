"""Threshold policy (lossy): accept drafted x_i while the target gives it π_i(x_i) ≥ τ.

Parameters (`--policy-param`): `tau` (default 0.1). τ = 0 accepts every drafted token; τ > 0.5
accepts only tokens that are the target's argmax, so the output equals target-only greedy
decoding at T = 0. π is the target's softmax (see `verifiers.lossy`).
"""

from __future__ import annotations

import torch

from specdec_core.verifiers.lossy import ScoringPolicy, drafted_probs


def threshold_approve(draft: torch.Tensor, pi: torch.Tensor, tau: float) -> torch.Tensor:
    """[k] bool: π_i(x_i) ≥ τ."""
    return drafted_probs(draft, pi) >= tau


class ThresholdVerifier(ScoringPolicy):
    name = "threshold"
    PARAMS = {"tau": 0.1}

    def approve(self, draft: torch.Tensor, q: torch.Tensor, pi: torch.Tensor) -> torch.Tensor:
        return threshold_approve(draft, pi, self.params["tau"])
