"""The lossless rule of speculative sampling (Leviathan et al. 2023, Alg. 1; Chen et al. 2023).

Accept drafted x_i ~ q_i with probability min(1, p_i(x_i) / q_i(x_i)); at the first rejection
sample the correction from norm(max(0, p_i − q_i)); if all k are accepted, sample the bonus
token from p_{k}. The output is distributed exactly as sampling from p alone.

At temperature 0 both p and q are one-hot (see `sampling.probs`), so the same rule reads
"accept while draft == argmax(target); then emit argmax(target)". The decode loop applies that
reading to the argmax ids directly (`verifiers/greedy.py`, tested against this rule) rather
than building one-hot rows; this function gives the same tokens at T = 0.
"""

from __future__ import annotations

import torch

from specdec_core.decoding.sampling import sample
from specdec_core.verifiers.base import ChainVerifier, Verdict


def speculative_accept(
    draft: torch.Tensor,  # [k] long: x_1..x_k
    q: torch.Tensor,  # [k, V]: draft distributions the x_i were sampled from
    p: torch.Tensor,  # [k+1, V]: target distributions at the same positions, plus one
    generator: torch.Generator | None,
) -> Verdict:
    k = draft.shape[0]
    if k:
        rows = torch.arange(k, device=draft.device)
        p_x = p[rows, draft]  # [k]
        q_x = q[rows, draft]  # [k]
        r = torch.rand(k, generator=generator, device=p.device)  # [k]
        rejected = (r * q_x >= p_x).nonzero()  # accept iff r < p/q, written without dividing
        if len(rejected):
            n = int(rejected[0, 0])
            return Verdict(accepted=n, next_token=correction(p[n], q[n], generator))
    return Verdict(accepted=k, next_token=sample(p[k], generator))


def correction(
    p_n: torch.Tensor,  # [V] target distribution at the first rejected position
    q_n: torch.Tensor,  # [V] draft distribution there
    generator: torch.Generator | None,
) -> int:
    """The target's token at a rejected position: a sample of norm(max(0, p − q))."""
    residual = (p_n - q_n).clamp(min=0.0)  # [V]
    total = residual.sum()
    # total == 0 only when p == q (rejection then has probability 0; guard rounding), or when
    # a lossy policy refused a draft equal to the target's own one-hot choice: emit p itself
    residual = residual / total if total > 0 else p_n
    return sample(residual, generator)


class LosslessVerifier(ChainVerifier):
    name = "lossless"
    lossy = False

    def decide(self, draft, q, p, generator, p_soft) -> Verdict:
        return speculative_accept(draft, q, p, generator)
