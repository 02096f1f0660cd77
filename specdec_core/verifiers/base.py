"""What a verifier (acceptance policy) is: draft tokens + two distributions in, a verdict out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol

import torch


@dataclass(frozen=True)
class Verdict:
    accepted: int  # number of draft tokens accepted, from the first
    next_token: int  # the target's token after them: correction (accepted < k) or bonus


class ChainVerifier(Protocol):
    """A policy. Verifiers subclass this to inherit the defaults of what they may declare."""

    name: ClassVar[str]
    lossy: bool  # may depend on the parameters (ensemble with w = 1 is exact)
    # the decode loop also computes π (`verifiers.lossy.policy_probs`) and passes it as p_soft
    needs_soft_p: ClassVar[bool] = False
    PARAMS: ClassVar[dict[str, float]] = {}  # `--policy-param` names and their defaults

    def verify(
        self,
        draft: torch.Tensor,  # [k] long
        q: torch.Tensor | None,  # [k, V] draft probabilities; None = deterministic drafter
        p: torch.Tensor,  # [k+1, V] target probabilities (same temperature / top-p as q)
        generator: torch.Generator | None,
        p_soft: torch.Tensor | None = None,  # [k+1, V] π, given when `needs_soft_p`
    ) -> Verdict:
        """The policy's `decide`, a deterministic drafter's q being all mass on its tokens."""
        q = q if q is not None else one_hot_q(draft, p.shape[-1])
        return self.decide(draft, q, p, generator, p_soft)

    def decide(
        self,
        draft: torch.Tensor,
        q: torch.Tensor,  # [k, V]
        p: torch.Tensor,
        generator: torch.Generator | None,
        p_soft: torch.Tensor | None,
    ) -> Verdict:
        """The policy's rule, with q given (see `verify`)."""
        ...


def one_hot_q(draft: torch.Tensor, vocab: int) -> torch.Tensor:
    """q for a deterministic drafter: all mass on the drafted token.  # [k, V]"""
    return torch.nn.functional.one_hot(draft, vocab).float()
