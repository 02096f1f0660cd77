"""The distance at the first position of a tree drafted by sampling (EAGLE-2 at T > 0), estimated
by drawing the root's children again.

A sampled tree's root children are `draws` i.i.d. draws from the head's root row q0 (with
replacement, `sampling.sample_many`; a token drawn twice is one child, listed where it was first
drawn: drafters/eagle2/sampled.py), then any merged-in children (a lookup chain's: one-hot q,
tried after the drawn ones, drafters/eagle2/merge.py). The token the step emits first is:

- lossless rule: recursive rejection sampling over the children in draw order (verifiers/tree.py),
  a duplicate tried twice; its first token is decided at the root row alone, so P = p exactly;
- a lossy policy: every root-to-leaf path verified as a chain from the same random state, the
  longest accepted prefix wins (ties to the first path); its first token if accepted, else the
  first path's fallback r (the policy's residual at q0).

`sampled_tree_distance` repeats that `samples` times: the children redrawn from the step's q0 by
the drafter's own scheme, and verified by the policy on the step's own rows. A redrawn child whose
token is a root child of the real tree brings that child's real paths (their root row set to q0:
it was drawn); a token the real tree does not hold is a one-token path scored at the root row (the
row after it, which only a bonus draw reads, is the root's again). The estimate P̂ = v̂ + (1 − Σ v̂)
· r, with v̂(y) the share of repetitions that emit an accepted y, has a grouped-jackknife standard
error (`fidelity.estimated_distance`).

What is exact and what stands in:

- the root decision of a single-token rule (`lossless`, `threshold`, `typical`, `cosine`,
  `ensemble`) reads the root row only, so which redrawn children the policy accepts is exact;
  when at most one is accepted, or the tree has depth 1, the whole estimate is exact up to
  sampling (and always for the lossless rule);
- where several redrawn children are accepted, the longest accepted path decides between them:
  a child the real tree holds is judged by its real subtree, which stands in for the subtree
  the head would have drawn below it in the redrawn tree (no head or target forward is run
  again), and a child it does not hold counts as a leaf (accepted length 1 at most);
- a windowed rule (`ngram`, `hybrid`, `fly`) decides position 0 from the drafted tokens after
  it: a redrawn child the real tree does not hold is judged as a one-token chain (the n-gram
  span of one token; FLy cannot defer it and applies the native rule), an approximation.

Rules whose accepted count reads no random draw (`threshold`, `typical`, `cosine`, `ngram`,
`hybrid`) have every path verified once, so a repetition costs only its draws and lookups; the
single-token ones among them, which approve a child the tree does not hold from one vector of
the root row, take at least FIXED_SAMPLES repetitions (the estimate's noise, and the upward bias
of a TV computed from a noisy P̂, fall with them). The others (`ensemble`, `fly`) verify every
path of every repetition, as `verify_paths` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from specdec_core.decoding.proposal import Proposal
from specdec_core.decoding.sampling import sample_many
from specdec_core.measurement.fidelity import (
    CLOSED_FORMS,
    Distance,
    PathCall,
    estimated_distance,
    residual,
)
from specdec_core.verifiers.base import ChainVerifier
from specdec_core.verifiers.cosine import CosineVerifier
from specdec_core.verifiers.hybrid import HybridVerifier
from specdec_core.verifiers.lossy import ScoringPolicy
from specdec_core.verifiers.ngram import NgramVerifier
from specdec_core.verifiers.threshold import ThresholdVerifier
from specdec_core.verifiers.tree import verify_tree
from specdec_core.verifiers.typical import TypicalVerifier

FIXED_SAMPLES = 4096  # repetitions, at least, where one costs only its draws and lookups
# policies that approve by scores of π and q: the accepted count of a path draws nothing
FIXED_ACCEPTANCE = (
    ThresholdVerifier,
    TypicalVerifier,
    CosineVerifier,
    NgramVerifier,
    HybridVerifier,
)


@dataclass(frozen=True)
class _Root:
    """The step's tree seen from its root: the rows there and the paths below each child."""

    q0: torch.Tensor  # [V] the row the root's children were drawn from
    p0: torch.Tensor  # [V] the target's root row
    pi0: torch.Tensor | None  # [V] π at the root (None: the policy scores p)
    drawn: dict[int, list[PathCall]]  # a drawn child's token -> its paths, in verification order
    added: dict[int, list[PathCall]]  # a merged-in child's token -> its paths (one-hot root row)

    @classmethod
    def of(cls, calls: Sequence[PathCall]) -> _Root:
        first = calls[0]  # the first path starts with the first drawn child
        q0 = first.q[0]
        drawn: dict[int, list[PathCall]] = {}
        added: dict[int, list[PathCall]] = {}
        for call in calls:
            token = int(call.draft[0])
            if token in drawn or token in added:
                (drawn if token in drawn else added)[token].append(call)
            else:
                (drawn if torch.equal(call.q[0], q0) else added)[token] = [call]
        pi0 = first.p_soft[0] if first.p_soft is not None else None
        return cls(q0, first.p[0], pi0, drawn, added)

    def paths(self, token: int, drawn: bool) -> list[PathCall]:
        """The paths below a root child `token`: the real ones (root row q0 where `drawn`), or a
        one-token path scored at the root row where the real tree does not hold it."""
        real = self.drawn.get(token) or self.added.get(token)
        if real is None:
            return [self.leaf(token)]
        if not drawn or token in self.drawn:
            return real
        return [PathCall(c.draft, torch.cat([self.q0[None], c.q[1:]]), c.p, c.p_soft) for c in real]

    def leaf(self, token: int) -> PathCall:
        draft = torch.tensor([token], device=self.p0.device)
        soft = torch.stack([self.pi0, self.pi0]) if self.pi0 is not None else None
        return PathCall(draft, self.q0[None], torch.stack([self.p0, self.p0]), soft)

    def children(self, tokens: list[int]) -> list[tuple[int, bool]]:
        """(token, drawn) of the root's children for these draws: the distinct drawn tokens in
        draw order, then the merged-in ones not drawn."""
        drawn = list(dict.fromkeys(tokens))
        return [(t, True) for t in drawn] + [(t, False) for t in self.added if t not in drawn]


def sampled_tree_distance(
    policy: ChainVerifier,
    calls: Sequence[PathCall],  # the step's paths, in the order `verify_paths` tries them
    draws: int,  # the root's i.i.d. draws (the tree's top-k)
    generator: torch.Generator,  # its own: sampling here must not move the run's generator
    samples: int = 256,
    groups: int = 8,
) -> Distance:
    """The estimated distance at the first position of a sampled tree (see the module
    docstring): `samples` repetitions (at least FIXED_SAMPLES for `threshold`, `typical` and
    `cosine`), each the root's `draws` children redrawn from q0 and verified."""
    root = _Root.of(calls)
    vocab = root.p0.shape[-1]
    pi0 = root.pi0 if root.pi0 is not None else root.p0
    form = CLOSED_FORMS.get(type(policy))
    fallback = (
        form(policy, root.q0, root.p0, pi0)[1] if form is not None else residual(root.p0, root.q0)
    )
    fixed = policy.lossy and isinstance(policy, FIXED_ACCEPTANCE)
    samples = max(samples, FIXED_SAMPLES) if fixed and form is not None else samples
    tokens = sample_many(root.q0, draws * samples, generator)  # i.i.d., as the drafter draws
    redrawn = [tokens[i * draws : (i + 1) * draws] for i in range(samples)]
    if not policy.lossy:
        first = [_recursive(root, policy, drawn, generator) for drawn in redrawn]
    elif fixed:
        first = _fixed(root, policy, redrawn, generator, vocab)
    else:
        first = [_paths(root, policy, drawn, generator, vocab) for drawn in redrawn]
    emitted = torch.tensor(first, dtype=torch.long, device=root.p0.device)
    return estimated_distance(emitted, fallback, root.p0, groups)


def _recursive(root: _Root, policy, tokens: list[int], generator) -> int:
    """The lossless rule's first token: recursive rejection sampling at the root."""
    children = root.children(tokens)
    index = {token: i for i, (token, _) in enumerate(children)}
    vocab = root.q0.shape[-1]
    ids = torch.tensor([t for t, _ in children], device=root.q0.device)
    one_hot = torch.nn.functional.one_hot(ids, vocab)
    q = torch.stack(
        [root.q0 if drawn else one_hot[i].to(root.q0) for i, (_, drawn) in enumerate(children)]
    )
    order = (*(index[t] for t in tokens), *(index[t] for t, drawn in children if not drawn))
    tree = Proposal(
        tokens=[t for t, _ in children], q=q, parents=(-1,) * len(children), draws=order
    )
    p = root.p0[None].expand(len(children) + 1, vocab)  # below a child: only its bonus draw
    path, next_token = verify_tree(tree, p, generator, policy)
    return tree.tokens[path[0]] if path else next_token


def _paths(root: _Root, policy, tokens: list[int], generator, vocab: int) -> int:
    """A lossy policy's first token (vocab: refused), every path verified as `verify_paths`
    does: from the same random state, the longest accepted prefix, ties to the first path."""
    start = generator.get_state()
    best, best_accepted, end = vocab, 0, None
    for token, drawn in root.children(tokens):
        for call in root.paths(token, drawn):
            generator.set_state(start)
            if isinstance(policy, ScoringPolicy):  # its uniforms as `verify` draws them
                accepted = _accepted(policy, call, generator)
            else:
                verdict = policy.verify(call.draft, call.q, call.p, generator, p_soft=call.p_soft)
                accepted = verdict.accepted
            if end is None or accepted > best_accepted:  # the first path, or a longer prefix
                best = token if accepted else vocab
                best_accepted, end = accepted, generator.get_state()
    generator.set_state(end)  # as the chosen path's verification left it: the next draws differ
    return best


def _fixed(root: _Root, policy, redrawn: list[list[int]], generator, vocab: int) -> list[int]:
    """`_paths` for a policy whose accepted counts draw nothing (a `ScoringPolicy`): each real
    child's longest accepted prefix counted once (per root row it can have), a child the tree
    does not hold approved or not at the root row, then every repetition looked up."""
    form = CLOSED_FORMS.get(type(policy))
    pi0 = root.pi0 if root.pi0 is not None else root.p0
    approved = None  # the tokens a single-token rule approves at the root row
    if form is not None:
        approved = set(form(policy, root.q0, root.p0, pi0)[0].nonzero().flatten().tolist())
    longest: dict[tuple[int, bool], int] = {}

    def length(token: int, drawn: bool) -> int:
        key = (token, drawn or token in root.drawn)
        if key not in longest:
            if approved is not None and token not in root.drawn and token not in root.added:
                longest[key] = int(token in approved)  # the one-token path's verdict
            else:
                paths = root.paths(token, drawn)
                longest[key] = max(_accepted(policy, call, generator) for call in paths)
        return longest[key]

    first = []
    for tokens in redrawn:
        best, best_accepted = vocab, 0
        for token, drawn in root.children(tokens):
            accepted = length(token, drawn)
            if accepted > best_accepted:
                best, best_accepted = token, accepted
        first.append(best)
    return first


def _accepted(policy, call: PathCall, generator) -> int:
    """The accepted count `verify` gives the path (a `ScoringPolicy`'s rule draws the same
    uniforms first), without drawing its next token."""
    pi = call.p_soft if call.p_soft is not None else call.p
    return policy.accepted(call.draft, call.q, call.p, pi, generator)
