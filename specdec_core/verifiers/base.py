"""What a verifier (acceptance policy) is: draft tokens + two distributions in, a verdict out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch


@dataclass(frozen=True)
class Verdict:
    accepted: int  # number of draft tokens accepted, from the first
    next_token: int  # the target's token after them: correction (accepted < k) or bonus


class ChainVerifier(Protocol):
    name: str
    lossy: bool

    def verify(
        self,
        draft: torch.Tensor,  # [k] long
        q: torch.Tensor | None,  # [k, V] draft probabilities; None = deterministic drafter
        p: torch.Tensor,  # [k+1, V] target probabilities (same temperature / top-p as q)
        generator: torch.Generator | None,
    ) -> Verdict: ...


def one_hot_q(draft: torch.Tensor, vocab: int) -> torch.Tensor:
    """q for a deterministic drafter: all mass on the drafted token.  # [k, V]"""
    return torch.nn.functional.one_hot(draft, vocab).float()
