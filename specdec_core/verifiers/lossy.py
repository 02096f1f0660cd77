"""What the lossy chain policies share: the distribution they score, their parameters, the verdict.

**Which target distribution a policy scores (π).** The decode loop hands every verifier p, the
target's distribution after temperature and top-p (`sampling.probs`). At temperature 0 that p is
the one-hot argmax, and any rule "accept x if p(x) is high enough" would collapse into the
lossless rule. So the scoring policies (threshold, cosine, typical, ngram, hybrid) read π:

- T > 0: π = p (the distribution that would be sampled: same temperature and top-p);
- T = 0: π = softmax(logits) at temperature 1 (with the same top-p), the model's own beliefs.

`policy_probs` is that rule; the decode loop computes π only for verifiers whose `needs_soft_p`
is True and passes it as `verify(..., p_soft=π)`. Called without it, a policy scores against p.
The draft distribution q is used as the drafter gives it (at T = 0 it is one-hot too; see
`cosine`). The `ensemble` policy is a sampling rule on p and q and needs no π.

**Verdict.** A scoring policy accepts the longest prefix of drafted tokens it approves of. At the
first refused position the target's token is drawn as in the lossless rule, from
norm(max(0, p − q)) (at T = 0: the target's argmax); after a fully accepted draft the bonus
token is drawn from p at position k+1.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from specdec_core.decoding.config import is_greedy
from specdec_core.decoding.sampling import probs, sample
from specdec_core.errors import SpecdecError
from specdec_core.verifiers.base import ChainVerifier, Verdict
from specdec_core.verifiers.lossless import correction


def policy_probs(
    logits: torch.Tensor, temperature: float, top_p: float = 1.0, p: torch.Tensor | None = None
) -> torch.Tensor:
    """π: the target distribution a lossy policy scores; softmax at T = 1 when decoding greedily.
    Above T = 0 π is p itself: `p`, where the caller has computed it already, is returned as it
    is (the rows' softmax and top-p are computed once a step)."""
    if not is_greedy(temperature):
        return p if p is not None else probs(logits, temperature, top_p)
    return probs(logits, 1.0, top_p)


def drafted_probs(draft: torch.Tensor, dist: torch.Tensor) -> torch.Tensor:
    """dist_i(x_i) for each drafted x_i: [k] from [k] ids and [k, V] distributions."""
    return dist.gather(-1, draft[:, None]).squeeze(-1)


def leading_true(approved: torch.Tensor) -> int:
    """Number of leading True entries of a [k] bool tensor (the accepted prefix)."""
    refused = (~approved).nonzero()
    return int(refused[0, 0]) if len(refused) else int(approved.shape[0])


def verdict_after(
    n: int,  # drafted tokens accepted
    q: torch.Tensor,  # [k, V] draft distributions
    p: torch.Tensor,  # [k+1, V] target distributions (temperature / top-p applied)
    generator: torch.Generator | None,
) -> Verdict:
    """Accept n drafts, then the target's correction at n (n < k) or its bonus token (n = k)."""
    k = q.shape[0]
    if n < k:
        return Verdict(accepted=n, next_token=correction(p[n], q[n], generator))
    return Verdict(accepted=k, next_token=sample(p[k], generator))


def check_params(policy: str, defaults: dict[str, float], given: dict[str, float]) -> dict:
    """The policy's defaults updated with `given`; an unknown name is a clear error."""
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        takes = ", ".join(f"{name} (default {value:g})" for name, value in defaults.items())
        raise SpecdecError(
            f"policy '{policy}' has no parameter {', '.join(unknown)}; "
            f"it takes: {takes or 'nothing'}"
        )
    return {**defaults, **{name: float(value) for name, value in given.items()}}


class ScoringPolicy(ChainVerifier):
    """A lossy chain verifier that approves each drafted token by a score of π (and q).

    Subclasses set `name`, `PARAMS` (parameter name -> default, the `--policy-param` names) and
    implement `approve`, or `accepted` for a rule that reads more than π and q at each row.
    """

    name: ClassVar[str] = ""
    lossy: ClassVar[bool] = True
    needs_soft_p: ClassVar[bool] = True
    PARAMS: ClassVar[dict[str, float]] = {}

    def __init__(self, **params: float) -> None:
        self.params = check_params(self.name, self.PARAMS, params)

    def approve(self, draft: torch.Tensor, q: torch.Tensor, pi: torch.Tensor) -> torch.Tensor:
        """[k] bool: which drafted tokens pass; `q` and `pi` are [k, V] at the drafted rows."""
        raise NotImplementedError

    def decide(self, draft, q, p, generator, p_soft) -> Verdict:
        pi = p_soft if p_soft is not None else p  # π; defaults to p
        n = self.accepted(draft, q, p, pi, generator) if draft.shape[0] else 0
        return verdict_after(n, q, p, generator)

    def accepted(
        self,
        draft: torch.Tensor,  # [k] long, k >= 1
        q: torch.Tensor,  # [k, V]
        p: torch.Tensor,  # [k+1, V]
        pi: torch.Tensor,  # [k+1, V]
        generator: torch.Generator | None,
    ) -> int:
        """The length of the accepted prefix: the leading run of tokens `approve` passes."""
        return leading_true(self.approve(draft, q, pi[: draft.shape[0]]))
