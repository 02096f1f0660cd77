"""Hybrid policy (lossy): the n-gram screen, then the logits check; a token must pass both.

Accepted: the longest prefix of drafted tokens that lies in the span the n-gram policy accepts
(overlap with the target's greedy continuation ≥ `ngram_tau`, see `verifiers.ngram`) and whose
every token has π_i(x_i) ≥ `logit_tau` (see `verifiers.threshold`).

Parameters (`--policy-param`): `n` (default 2), `ngram_tau` (default 0.5), `logit_tau`
(default 0.05). Both thresholds 0 accept every drafted token; either part at its strictest
makes the whole as strict.
"""

from __future__ import annotations

import torch

from specdec_core.verifiers.lossy import ScoringPolicy
from specdec_core.verifiers.ngram import ngram_approve
from specdec_core.verifiers.threshold import threshold_approve


def hybrid_approve(
    draft: torch.Tensor, pi: torch.Tensor, n: float, ngram_tau: float, logit_tau: float
) -> torch.Tensor:
    """[k] bool: inside the n-gram span and π_i(x_i) ≥ logit_tau."""
    return ngram_approve(draft, pi, n, ngram_tau) & threshold_approve(draft, pi, logit_tau)


class HybridVerifier(ScoringPolicy):
    name = "hybrid"
    PARAMS = {"n": 2.0, "ngram_tau": 0.5, "logit_tau": 0.05}

    def approve(self, draft: torch.Tensor, q: torch.Tensor, pi: torch.Tensor) -> torch.Tensor:
        params = self.params
        return hybrid_approve(draft, pi, params["n"], params["ngram_tau"], params["logit_tau"])
