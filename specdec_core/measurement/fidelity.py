"""Fidelity of a generation: agreement with the target-only greedy output, target log-prob, and
the distance of a policy's emitted distribution from the target's.

Lossy policies buy acceptance with fidelity; these are the prices `specdec bench` reports
(docs/architecture.md#measurement). With `output` a method's new tokens and `reference` the
autoregressive (target-only) new tokens on the same prompt, and L = max(len(output),
len(reference)):

- prefix agreement = (tokens before the first difference) / L: the share of the text that is
  exactly the target's own until the first divergence;
- token agreement = #{i : output_i = reference_i} / L: position-wise matches, which can recover
  after a divergence that did not shift the text;
- mean target log-prob = mean over the output tokens of log π(x_t | prompt, x_<t), π the target's
  softmax at temperature 1, from one teacher-forced target forward over prompt + output.

Both agreements are 1 for identical outputs (also two empty ones). At temperature 0 they say how
far a lossy policy strays from what the target would have written; the log-prob says how
plausible the target finds what was written instead.

**The distance, at any temperature** (`policy_distance`, per decode step). At the first drafted
position of a chain the step emits x ~ q if the policy accepts it, else its fallback: the token
is distributed as

    P(y) = Σ_x q(x) [a(x) · 1{y = x} + (1 − a(x)) · r(y)]  =  q·a + (1 − Σ_x q(x) a(x)) · r

with a(x) the policy's probability of accepting x and r its fallback distribution (the
lossless residual norm(max(0, p − q)), or p where that has no mass; the mixture's residual
for `ensemble`). q is the draft's row, one-hot on the drafted token for a deterministic
drafter or at T = 0; p the target's processed row (one-hot at T = 0), π the row a policy
scores. The distance is between P and p: total variation ½ Σ |P − p| and KL(P ‖ p) =
Σ P log(P / p) in nats, the target's surprise at what the policy emits. KL is +inf when P
emits a token p cannot: at T = 0 any chance of a non-argmax token (TV then says how much),
under top-p a rule that takes the draft's tokens outside the nucleus; at T > 0 with top-p 1
it is finite for every rule. The lossless rule gives P = p, distance 0.

- Single-token rules (`lossless`, `threshold`, `typical`, `cosine`, `ensemble`) decide a(x)
  from row 0 alone: P in closed form (`induced_distribution`), exact.
- FLy decides position 0 from its native (lossless) draws at the W positions after it, which
  are independent of x: a(x) = a₀(x) + (1 − a₀(x)) · gate(x) · Πⱼ Σ_y min(q_j(y), p_j(y)) for
  j = 1 … W (a₀ the lossless ratio; the product is 1 for W = 0 and 0 where the chain is too
  short for a window), P in closed form (`fly_induced`). For a sampled draft the rows after
  position 0 stand in for those x's own prefix would have had, as below.
- The n-gram rules (`ngram`, `hybrid`) decide position 0 from the drafted tokens after it, and
  x enters only through the n-grams it forms with the target's greedy tokens g: every x outside
  g is refused or approved alike. `ngram_distance` samples `samples` continuations from the
  rows after position 0 and counts, for each token of g and for "any other x", the share of
  them under which the rule approves position 0; a(x) is that share (times 1{π₀(x) ≥
  logit_tau} for `hybrid`) and P = q·a + (1 − Σ q·a) · r with q exact, so only a handful of
  shares carry sampling noise (a grouped-jackknife standard error; exact for a deterministic
  draft, whose continuation is the drafted one).
- Any other rule that decides from the drafted tokens after position 0 (`sampled_distance`): a
  is estimated by verifying `samples` chains x_i ~ q_i drawn from the step's rows (the drafted
  chain itself where q is None), P̂ = v̂ + (1 − Σ v̂) · r with v̂(x) the share of chains that
  start with x and are accepted there, with a grouped-jackknife standard error. The rows after
  position 0 were computed on the drafted prefix, so for a resampled chain they stand in for
  the rows its own prefix would have had (no extra target forward): exact for one-hot q (the
  chain is the drafted one and only the policy's own draws vary), an approximation otherwise;
  FLy's and the n-gram rules' continuations stand in the same way. Counting v̂(x) over
  sampled first tokens leaves a TV computed from P̂ biased upward by the draws' noise on every
  x q spreads over (about 0.09 per token with 64 chains on SmolLM2's rows at T = 1), which the
  forms above avoid by keeping q exact.

**Every token of a step** (`step_distances`, what a run's distance averages: run_distance.py).
A chain's token at position i was emitted by the rule at row i given the accepted prefix, so
each accepted draft and the correction is measured as above on the chain from i on; a bonus
token is the target's own draw (0). A tree verified path by path (`tree_distance`) is measured
at its first position, from the step's path verifications repeated with the policy's own draws
(deterministic trees). A tree drafted by sampling (EAGLE-2 at T > 0) is measured at its first
position too, by redrawing the root's children from the step's q0 and verifying them on the
step's rows (`sampled_tree_distance.py`; it needs the number of root draws, which
`step_distances` does not have).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from specdec_core.decoding.prefix_cache import common_prefix
from specdec_core.errors import SpecdecError
from specdec_core.verifiers import fly
from specdec_core.verifiers.base import ChainVerifier, one_hot_q
from specdec_core.verifiers.cosine import CosineVerifier, cosine_approve
from specdec_core.verifiers.ensemble import EnsembleVerifier
from specdec_core.verifiers.hybrid import HybridVerifier
from specdec_core.verifiers.lossless import LosslessVerifier
from specdec_core.verifiers.ngram import NgramVerifier, ngram_span
from specdec_core.verifiers.threshold import ThresholdVerifier
from specdec_core.verifiers.typical import TypicalVerifier, entropy


def prefix_agreement(output: Sequence[int], reference: Sequence[int]) -> float:
    longest = max(len(output), len(reference))
    return common_prefix(output, reference) / longest if longest else 1.0


def token_agreement(output: Sequence[int], reference: Sequence[int]) -> float:
    longest = max(len(output), len(reference))
    same = sum(a == b for a, b in zip(output, reference, strict=False))
    return same / longest if longest else 1.0


@torch.inference_mode()
def target_logprobs(
    model: PreTrainedModel, prompt_ids: Sequence[int], output_ids: Sequence[int]
) -> torch.Tensor:
    """[m] log π(x_t | prompt, x_<t) for the m output tokens, in one forward over both."""
    if not output_ids:
        return torch.zeros(0)
    ids = torch.tensor([[*prompt_ids, *output_ids]], device=model.device)  # [1, n + m]
    start = len(prompt_ids) - 1  # the logits at position t predict token t + 1
    logits = model(input_ids=ids, use_cache=False).logits[0, start:-1].float()  # [m, V]
    targets = ids[0, len(prompt_ids) :]  # [m]
    return logits.log_softmax(-1).gather(-1, targets[:, None]).squeeze(-1).cpu()


def mean_logprob(
    model: PreTrainedModel, prompt_ids: Sequence[int], output_ids: Sequence[int]
) -> float | None:
    """Mean target log-probability per output token (None for an empty output)."""
    if not output_ids:
        return None
    return float(target_logprobs(model, prompt_ids, output_ids).mean())


@dataclass(frozen=True)
class Distance:
    """How far a policy's emitted token at one position is from the target's distribution."""

    total_variation: float  # ½ Σ |P − p|, in [0, 1]
    kl: float  # KL(P ‖ p) in nats; +inf when P emits a token p cannot
    samples: int = 0  # 0: closed form (exact); else the chains sampled for the estimate
    total_variation_se: float = 0.0  # standard errors of an estimate (0 when exact)
    kl_se: float = 0.0

    @property
    def exact(self) -> bool:
        return self.samples == 0


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """[V] norm(max(0, p − q)), or p where that has no mass: what `lossless.correction` draws."""
    rest = (p - q).clamp(min=0.0)
    total = rest.sum()
    return rest / total if total > 0 else p


def _ratio(target: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """min(1, target / q) where q > 0 (0 elsewhere: q never drafts those)."""
    return torch.where(q > 0, target / q.clamp(min=1e-30), 0.0).clamp(max=1.0)


# a(x) over the vocabulary and the fallback r, from one row: (policy, q, p, π) -> (a, r)
Form = Callable[[ChainVerifier, torch.Tensor, torch.Tensor, torch.Tensor], tuple]


def _lossless(policy, q, p, pi):
    return _ratio(p, q), residual(p, q)


def _threshold(policy, q, p, pi):
    return pi >= policy.params["tau"], residual(p, q)  # `threshold_approve` for every x at once


def _typical(policy, q, p, pi):
    params = policy.params  # the bound of `typical_approve`, which depends on the row only
    bound = torch.clamp(params["delta"] * torch.exp(-entropy(pi)), max=params["epsilon"])
    return pi > bound, residual(p, q)


def _cosine(policy, q, p, pi):
    same = cosine_approve(q[None], pi[None], policy.params["tau"])  # [1]: no x in it
    return same.expand_as(q), residual(p, q)


def _ensemble(policy, q, p, pi):
    w = policy.params["w"]
    mixture = w * p + (1.0 - w) * q
    return _ratio(mixture, q), residual(mixture, q)


CLOSED_FORMS: dict[type, Form] = {
    LosslessVerifier: _lossless,
    ThresholdVerifier: _threshold,
    TypicalVerifier: _typical,
    CosineVerifier: _cosine,
    EnsembleVerifier: _ensemble,
}


def induced_distribution(
    policy: ChainVerifier,
    q: torch.Tensor,  # [V] the draft's row (one-hot on the drafted token if deterministic)
    p: torch.Tensor,  # [V] the target's processed row
    pi: torch.Tensor | None = None,  # [V] the scored row (`verifiers.lossy`); None: p
) -> torch.Tensor:
    """[V] the exact distribution a single-token rule emits at one drafted position."""
    form = CLOSED_FORMS.get(type(policy))
    if form is None:
        raise SpecdecError(
            f"policy '{policy.name}' decides a token from the drafted tokens after it; "
            "measure it on the whole chain with fidelity.policy_distance"
        )
    accept, fallback = form(policy, q, p, pi if pi is not None else p)  # as the rule computes
    kept = q.double() * accept.double()  # [V] P(draft x and accept it)
    return kept + (1.0 - kept.sum()).clamp(min=0.0) * fallback.double()


def fly_induced(
    policy: fly.FlyVerifier,
    q: torch.Tensor,  # [k, V] the chain's rows (one-hot where drafted deterministically)
    p: torch.Tensor,  # [k+1, V]
    pi: torch.Tensor,  # [k+1, V] the scored rows
) -> torch.Tensor:
    """[V] the distribution FLy emits at position 0 of a k-token chain: the lossless ratio,
    plus a refused x deferred when the gate passes and the next W drafted tokens are each
    accepted natively (probability Σ_y min(q_j, p_j) at row j, independent draws)."""
    k, window = q.shape[0], policy.window
    if window == 0:
        confirmed = 1.0
    elif k > window:
        confirmed = float(torch.minimum(q[1 : window + 1], p[1 : window + 1]).sum(-1).prod())
    else:
        confirmed = 0.0  # the window does not fit: the native rule alone
    passes = fly.gate(pi[:1], pi[:1], policy.params["entropy_threshold"])[0]  # [V]
    native = _ratio(p[0], q[0]).double()
    accept = native + (1.0 - native) * passes.double() * confirmed
    kept = q[0].double() * accept  # [V] P(draft x and accept it)
    return kept + (1.0 - kept.sum()).clamp(min=0.0) * residual(p[0], q[0]).double()


def divergence(induced: torch.Tensor, p: torch.Tensor) -> tuple[float, float]:
    """(total variation, KL(induced ‖ p) in nats) between two [V] distributions."""
    induced, p = induced.double(), p.double()
    tv = 0.5 * float((induced - p).abs().sum())
    emitted = induced > 0
    if bool((p[emitted] <= 0).any()):
        return tv, math.inf
    kl = float((induced[emitted] * (induced[emitted] / p[emitted]).log()).sum())
    return tv, max(kl, 0.0)


OTHER = -1  # "a token that is none of the target's greedy tokens" (in no n-gram of them)


def ngram_distance(
    policy: NgramVerifier | HybridVerifier,
    draft: torch.Tensor,  # [k] the drafted chain
    q: torch.Tensor | None,  # [k, V] or None (deterministic drafter)
    p: torch.Tensor,  # [k+1, V]
    p_soft: torch.Tensor | None,  # [k+1, V] π, or None (p)
    generator: torch.Generator,
    samples: int = 256,
    groups: int = 8,
) -> Distance:
    """The n-gram rules at position 0: the rule's approval there for each greedy token and for
    any other token, over sampled continuations (one, the drafted, for a deterministic draft)."""
    k, vocab = draft.shape[0], p.shape[-1]
    rows = q if q is not None else one_hot_q(draft, vocab)
    pi = p_soft if p_soft is not None else p
    params = policy.params
    tau = params["ngram_tau"] if isinstance(policy, HybridVerifier) else params["tau"]
    greedy = pi[:k].argmax(-1).tolist()
    if q is None or k == 1:
        continuations = [draft[1:].tolist()]
    else:
        continuations = torch.multinomial(rows[1:], samples, replacement=True, generator=generator)
        continuations = continuations.T.tolist()  # [samples][k - 1]
    classes = [*sorted(set(greedy)), OTHER]
    approved = torch.tensor(
        [[ngram_span([z, *c], greedy, int(params["n"]), tau) >= 1 for z in classes]
         for c in continuations],
        dtype=torch.float64,
    )  # fmt: skip
    floor = (
        (pi[0] >= params["logit_tau"]).double()
        if isinstance(policy, HybridVerifier)
        else torch.ones(vocab, dtype=torch.float64)
    )
    fallback = residual(p[0], rows[0]).double()

    def estimate(kept_rows: torch.Tensor) -> tuple[float, float]:
        share = approved[kept_rows].mean(0)  # [classes]
        accept = torch.full((vocab,), float(share[-1]), dtype=torch.float64)
        accept[classes[:-1]] = share[:-1]
        kept = rows[0].double() * accept * floor
        return divergence(kept + (1.0 - kept.sum()).clamp(min=0.0) * fallback, p[0])

    everything = torch.ones(len(continuations), dtype=torch.bool)
    if len(continuations) == 1:
        return Distance(*estimate(everything))
    group = torch.arange(len(continuations)) % groups
    left_out = [estimate(group != g) for g in range(groups)]
    return Distance(
        *estimate(everything),
        samples=len(continuations),
        total_variation_se=_jackknife([value[0] for value in left_out]),
        kl_se=_jackknife([value[1] for value in left_out]),
    )


def sampled_distance(
    policy: ChainVerifier,
    draft: torch.Tensor,  # [k] the drafted chain
    q: torch.Tensor | None,  # [k, V] or None (deterministic drafter)
    p: torch.Tensor,  # [k+1, V]
    p_soft: torch.Tensor | None,  # [k+1, V] π where the policy `needs_soft_p`
    generator: torch.Generator,
    samples: int = 256,
    groups: int = 8,
) -> Distance:
    """Estimate at position 0 for any policy: `samples` chains verified by the policy itself."""
    k, vocab = draft.shape[0], p.shape[-1]
    rows = q if q is not None else one_hot_q(draft, vocab)  # [k, V]
    if q is None:  # the drafted chain every time: only the policy's own draws vary
        chains = draft[None].expand(samples, k)
    else:
        chains = torch.multinomial(rows, samples, replacement=True, generator=generator).T
    first = torch.zeros(samples, dtype=torch.long, device=p.device)  # x_0 of each chain
    for i, chain in enumerate(chains):  # [k]
        if policy.verify(chain, q, p, generator, p_soft=p_soft).accepted:
            first[i] = chain[0]
        else:
            first[i] = vocab  # refused: the fallback's token, counted in an extra cell
    return estimated_distance(first, residual(p[0], rows[0]), p[0], groups)


def estimated_distance(
    first: torch.Tensor,  # [m] the token each sampled verification emitted first (V: refused)
    fallback: torch.Tensor,  # [V] r, what a refusal emits
    p0: torch.Tensor,  # [V] the target's row
    groups: int,
) -> Distance:
    """P̂ = v̂ + (1 − Σ v̂) · r against p0, with a grouped-jackknife standard error."""
    vocab, samples, fallback = p0.shape[-1], first.shape[0], fallback.double()

    def estimate(chosen: torch.Tensor) -> tuple[float, float]:  # chosen: [m] of first
        share = torch.bincount(chosen, minlength=vocab + 1)[:vocab].double() / len(chosen)
        return divergence(share + (1.0 - share.sum()) * fallback, p0)  # v̂ + refused · r

    groups = min(groups, samples)
    group = torch.arange(samples, device=first.device) % groups
    left_out = [estimate(first[group != g]) for g in range(groups)]
    return Distance(
        *estimate(first),
        samples=samples,
        total_variation_se=_jackknife([value[0] for value in left_out]),
        kl_se=_jackknife([value[1] for value in left_out]),
    )


def _jackknife(values: list[float]) -> float:
    """Standard error of a statistic from its delete-one-group values."""
    g = len(values)
    if g < 2 or any(math.isinf(v) for v in values):
        return 0.0 if g < 2 else math.inf
    mean = sum(values) / g
    return math.sqrt((g - 1) / g * sum((v - mean) ** 2 for v in values))


def policy_distance(
    policy: ChainVerifier,
    draft: torch.Tensor,  # [k] the step's drafted chain
    q: torch.Tensor | None,  # [k, V] its q rows, or None (deterministic drafter)
    p: torch.Tensor,  # [k+1, V] the target's processed rows of the step
    p_soft: torch.Tensor | None,  # [k+1, V] π, as the decode loop passes it (or None)
    generator: torch.Generator,  # its own: sampling here must not move the run's generator
    samples: int = 256,
) -> Distance:
    """The distance at the step's first drafted position: exact for single-token rules and
    FLy, the n-gram rules' approval sampled over continuations; 0 for a step that drafted
    nothing (the target's own token)."""
    if draft.shape[0] == 0:
        return Distance(0.0, 0.0)
    if isinstance(policy, fly.FlyVerifier):
        rows = q if q is not None else one_hot_q(draft, p.shape[-1])
        induced = fly_induced(policy, rows, p, p_soft if p_soft is not None else p)
        return Distance(*divergence(induced, p[0]))
    if isinstance(policy, NgramVerifier | HybridVerifier):
        return ngram_distance(policy, draft, q, p, p_soft, generator, samples)
    if type(policy) not in CLOSED_FORMS:
        return sampled_distance(policy, draft, q, p, p_soft, generator, samples)
    q0 = q[0] if q is not None else one_hot_q(draft[:1], p.shape[-1])[0]
    pi0 = p_soft[0] if p_soft is not None else None
    return Distance(*divergence(induced_distribution(policy, q0, p[0], pi0), p[0]))


@dataclass(frozen=True)
class PathCall:
    """One verification a step made: the chain's drafted tokens and the rows that scored them
    (a chain step makes one; a tree step under a lossy policy one per root-to-leaf path,
    `verifiers/tree.py: verify_paths`)."""

    draft: torch.Tensor  # [k]
    q: torch.Tensor | None  # [k, V] or None (deterministic)
    p: torch.Tensor  # [k+1, V]
    p_soft: torch.Tensor | None  # [k+1, V] or None


def step_distances(
    policy: ChainVerifier,
    calls: Sequence[PathCall],
    accepted: int,
    generator: torch.Generator,
    samples: int = 256,
) -> list[Distance] | None:
    """The distance of each token a step emitted, from the verifications it made (None where
    it cannot be measured: no call, or a tree drafted by sampling, whose root draws only the
    caller knows: `sampled_tree_distance`).

    One call is a chain that accepted `accepted` of its k drafted tokens: position i (for
    i = 0 … min(accepted, k − 1)) emitted its token with the rule at row i given the accepted
    prefix, so each is `policy_distance` on the chain from i on (exact for single-token rules;
    for a windowed rule the rule restricted to that suffix: FLy's window reads the same rows,
    the n-gram precision counts from i); after a full acceptance the bonus token is the
    target's own (0). Several calls are the paths of a tree: its first position only
    (`tree_distance`)."""
    if not calls:
        return None
    if len(calls) > 1:
        if any(call.q is not None for call in calls):
            return None
        return [tree_distance(policy, calls, generator, samples)]
    call = calls[0]
    k = call.draft.shape[0]
    distances = []
    for i in range(min(accepted, k - 1) + 1 if k else 1):
        distances.append(
            policy_distance(
                policy,
                call.draft[i:],
                call.q[i:] if call.q is not None else None,
                call.p[i:],
                call.p_soft[i:] if call.p_soft is not None else None,
                generator,
                samples,
            )
        )
    if k and accepted == k:
        distances.append(Distance(0.0, 0.0))  # the bonus token, drawn from p
    return distances


def tree_distance(
    policy: ChainVerifier,
    calls: Sequence[PathCall],  # the step's paths, in the order `verify_paths` tries them
    generator: torch.Generator,
    samples: int = 256,
    groups: int = 8,
) -> Distance:
    """The distance at the first position of a deterministic tree (one-hot q on every node)
    verified path by path: the step's `verify_paths` repeated `samples` times with the
    policy's own draws (every path from the same random state, the longest accepted prefix
    wins, ties to the first path); a refusal at the root emits the first path's fallback r.
    Exact (one pass, `samples` 0) when the verification draws nothing."""
    p0 = calls[0].p[0]
    vocab = p0.shape[-1]
    q0 = one_hot_q(calls[0].draft[:1], vocab)[0]
    pi0 = calls[0].p_soft[0] if calls[0].p_soft is not None else p0
    form = CLOSED_FORMS.get(type(policy))
    fallback = form(policy, q0, p0, pi0)[1] if form is not None else residual(p0, q0)

    def one() -> int:  # the token the step emits first (vocab: refused at the root)
        start = generator.get_state()
        best, end = None, start
        for call in calls:
            generator.set_state(start)
            verdict = policy.verify(call.draft, None, call.p, generator, p_soft=call.p_soft)
            if best is None or verdict.accepted > best[1].accepted:
                best, end = (call, verdict), generator.get_state()
        generator.set_state(end)
        call, verdict = best
        return int(call.draft[0]) if verdict.accepted else vocab

    before = generator.get_state()
    token = one()
    if torch.equal(generator.get_state(), before):  # nothing drawn: the outcome is certain
        emitted = (
            one_hot_q(calls[0].draft.new_tensor([token]), vocab)[0] if token < vocab else fallback
        )
        return Distance(*divergence(emitted, p0))
    first = torch.tensor([token, *(one() for _ in range(samples - 1))], device=p0.device)
    return estimated_distance(first, fallback, p0, groups)
