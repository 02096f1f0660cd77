"""Static ensemble verification (lossy for w < 1): speculative sampling against a mixture.

The lossless rule (`verifiers.lossless`) run with m_i = w · p_i + (1 − w) · q_i in place of p_i
at the drafted positions: accept x_i with probability min(1, m_i(x_i) / q_i(x_i)); at the first
rejection draw from norm(max(0, m_i − q_i)); the bonus token after a fully accepted draft comes
from p itself. The output then follows the mixture instead of the target. w = 1 is exactly the
lossless rule (same random draws, same output); w = 0 accepts every drafted token.

Parameters (`--policy-param`): `w` (default 0.5), the target's weight in [0, 1]. Works on the
processed p and q (temperature / top-p applied): at T = 0 a draft that differs from the target's
argmax is accepted with probability 1 − w.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from specdec_core.errors import SpecdecError
from specdec_core.verifiers.base import ChainVerifier, Verdict
from specdec_core.verifiers.lossless import speculative_accept
from specdec_core.verifiers.lossy import check_params


def ensemble_accept(
    draft: torch.Tensor,  # [k] long
    q: torch.Tensor,  # [k, V]
    p: torch.Tensor,  # [k+1, V]
    w: float,
    generator: torch.Generator | None,
) -> Verdict:
    """Speculative sampling against m = w·p + (1−w)·q at the drafted rows."""
    k = draft.shape[0]
    m = torch.cat([w * p[:k] + (1.0 - w) * q, p[k:]])  # [k+1, V]
    return speculative_accept(draft, q, m, generator)


class EnsembleVerifier(ChainVerifier):
    name = "ensemble"
    PARAMS: ClassVar[dict[str, float]] = {"w": 0.5}

    def __init__(self, **params: float) -> None:
        self.params = check_params(self.name, self.PARAMS, params)
        if not 0.0 <= self.params["w"] <= 1.0:
            raise SpecdecError(f"policy 'ensemble' needs 0 <= w <= 1 (got {self.params['w']:g})")
        self.lossy = self.params["w"] < 1.0

    def decide(self, draft, q, p, generator, p_soft) -> Verdict:
        return ensemble_accept(draft, q, p, self.params["w"], generator)
