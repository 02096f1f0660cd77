"""EAGLE-2 tree size for this device: `--tree-tokens auto` (docs/architecture.md).

A tree step costs one target forward over the tree, `depth` head steps over the top-k beam and
one head step over the accepted path (the commit), and gains the expected number of accepted
tokens. Both costs are measured on this device by their owner (`forward_costs.ForwardCosts`:
once per model and head, the target's then following the decode steps' own timings; the table in
use is `Costs.text()`, at the end of the reason); the gain comes from an acceptance prior: the
head's rank-r token is the target's with probability π_r, where the chance that one of its top-k
is right is α(k) = 1 − (1 − α₁)·k^(−1/2) (α₁ = top-1 acceptance). Under that prior
`expected_tau` runs the same beam search the drafter runs (drafters/eagle2/growth.py: top-k by
cumulative probability, best `total_tokens − 1` nodes) and sums the nodes' path probabilities:
E[τ] = 1 + Σ P(node on the accepted path). `choose` takes the shape with the most tokens per
second. The prior α₁ = 0.6 is only the start: `observe` counts how often the target accepted the
head's top-1 child at each verified tree level (measured directly, whatever the tree shape, so a
small tree does not lock itself in), blended with what was known before and kept per head by its
owner (`AcceptanceEstimates`: a run, a benchmark, an engine), so the size follows the head in
use.

On a GPU a forward over 60 tokens costs about as much as over one, so this lands on EAGLE's
defaults (60 tokens, depth 6, top-k 10); on a CPU every verified token adds to the forward
and every head step counts, so trees stay small. Measured costs and the sizes they led to are
in docs/benchmarks.md. This module is the cost model; the drafter's online sizing (which
dimensions are given, the tallies, the head timing) is drafters/eagle2/sizing.py.
Units: `depth` is the longest draft path (tree levels; EAGLE's code counts expansions after the
root, one fewer); `total_tokens` counts the root (the pending token), as EAGLE's
`total_token`. A given shape larger than its beam can fill is `capped`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.forward_costs import Costs
from specdec_core.decoding.target import TargetOutput

MAX_DEPTH, MAX_TOPK, MAX_TOKENS = 8, 10, 60  # EAGLE: 60 tokens, top-k 10
ALPHA1 = 0.6  # prior top-1 acceptance of a trained head
PRIOR_TRIALS, MEMORY_TRIALS = 8, 128  # weight of the prior α₁; most weight the past gets


@dataclass(frozen=True)
class TreeShape:
    depth: int  # longest draft path (tree levels)
    topk: int  # beam width and children per expanded node
    total_tokens: int  # tree nodes + the root

    @property
    def nodes(self) -> int:
        return self.total_tokens - 1


@dataclass(frozen=True)
class Choice:
    shape: TreeShape
    expected_tau: float
    step_seconds: float | None  # None when the shape was given, not sized
    reason: str
    costs: Costs | None = field(default=None, repr=False)

    def describe(self) -> dict:
        """The chosen size for the Started event, the CLI and the benchmark JSON."""
        return {
            "tree_depth": self.shape.depth,
            "tree_topk": self.shape.topk,
            "tree_tokens": self.shape.total_tokens,
            "tree_sizing": self.reason,
            **({"forward_costs": self.costs.describe()} if self.sized else {}),
        }

    @property
    def sized(self) -> bool:
        """Sized from measured costs (not given)."""
        return self.costs is not None and self.step_seconds is not None


def capped(shape: TreeShape) -> TreeShape:
    """`shape` with at most the nodes its beam can yield: top-k at the root, k·k per level."""
    most = shape.topk + (shape.depth - 1) * shape.topk * shape.topk
    return TreeShape(shape.depth, shape.topk, min(shape.total_tokens, most + 1))


def expected_tau(shape: TreeShape, alpha1: float = ALPHA1) -> float:
    """E[accepted tokens + 1] of the EAGLE-2 tree of `shape` under the acceptance prior."""
    return float(tau_curve(shape.depth, shape.topk, alpha1)[shape.nodes])


def choose(
    costs: Costs,
    alpha1: float | None = ALPHA1,
    depth: int | None = None,
    topk: int | None = None,
    total_tokens: int | None = None,
) -> Choice:
    """The shape with the most expected tokens per second; given dimensions stay fixed."""
    alpha1 = ALPHA1 if alpha1 is None else alpha1
    best: tuple[float, TreeShape, float, float] | None = None
    commit = costs.head_seconds(2)  # the head over the accepted rows (~2 per step)
    # the tables as plain floats once: the search below visits ~5,000 shapes on every refit
    target = [0.0] + [costs.target_seconds(n) for n in range(1, MAX_TOKENS + 1)]
    for d in [depth] if depth else range(1, MAX_DEPTH + 1):
        for k in [topk] if topk else range(1, MAX_TOPK + 1):
            curve = tau_curve(d, k, alpha1).tolist()  # [candidates + 1]
            most = min(MAX_TOKENS, len(curve))
            head = costs.head_seconds(k)
            for n in [total_tokens] if total_tokens else range(2, most + 1):
                tau = curve[min(n - 1, len(curve) - 1)]
                forward = target[n] if 1 <= n <= MAX_TOKENS else costs.target_seconds(n)
                seconds = forward + d * head + commit
                if best is None or tau / seconds > best[0] * (1 + 1e-3):
                    best = (tau / seconds, TreeShape(d, k, n), tau, seconds)
    assert best is not None
    _, shape, tau, seconds = best
    reason = (
        f"auto: E[tau] {tau:.2f} at top-1 acceptance {alpha1:.2f}; step "
        f"{1000 * seconds:.1f} ms = target over {shape.total_tokens} tokens "
        f"{1000 * costs.target_seconds(shape.total_tokens):.1f} ms (1 token "
        f"{1000 * costs.target_seconds(1):.1f} ms) + {shape.depth} head steps x{shape.topk} "
        f"of {1000 * costs.head_seconds(shape.topk):.2f} ms + commit {1000 * commit:.2f} ms; "
        f"{costs.text()}"
    )
    return Choice(shape, tau, seconds, reason, costs)


def tau_curve(depth: int, topk: int, alpha1: float) -> torch.Tensor:
    """E[tau] for the best 0, 1, 2, … nodes of the beam search under the prior.  # [c + 1]"""
    pi = _rank_probs(topk, alpha1)  # [k]
    beam, values = pi, [pi]  # level 1: the root's top-k
    for _ in range(depth - 1):
        children = (beam[:, None] * pi[None, :]).flatten()  # [k*k]
        values.append(children)
        beam = children.topk(topk).values
    ranked = torch.cat(values).sort(descending=True).values
    return torch.cat([torch.ones(1, dtype=ranked.dtype), 1.0 + ranked.cumsum(0)])


class AcceptanceEstimates:
    """Each head's top-1 acceptance α₁ (keyed by head and sampling settings), the prior until
    `observe` blends in what was measured. A fresh one starts every head from the prior."""

    def __init__(self) -> None:
        self._estimates: dict[tuple, tuple[float, float]] = {}  # key -> (α₁, weight in trials)

    def acceptance(self, key: tuple) -> float:
        """The current top-1 acceptance estimate of a head (the prior until `observe`)."""
        return self._estimates.get(key, (ALPHA1, PRIOR_TRIALS))[0]

    def observe(self, key: tuple, trials: int, hits: int) -> float:
        """Blend in `trials` tree levels verified, `hits` of which accepted the head's top-1."""
        old, weight = self._estimates.get(key, (ALPHA1, PRIOR_TRIALS))
        new = (old * weight + hits) / (weight + trials)
        self._estimates[key] = (new, min(weight + trials, MEMORY_TRIALS))
        return new


def _rank_probs(k: int, alpha1: float) -> torch.Tensor:
    """π_r for r = 1..k: α(r) − α(r−1) with α(r) = 1 − (1 − α₁)·r^(−1/2).  # [k]"""
    r = torch.arange(1, k + 1, dtype=torch.float64)
    alpha = 1 - (1 - alpha1) * r.rsqrt()
    return torch.diff(alpha, prepend=torch.zeros(1, dtype=torch.float64))


class SizedByCosts:
    """What a drafter whose tree its `sizer` sizes from measured costs and tallied acceptance
    shares (EAGLE-2, Medusa): the size it chose for a config (`describe`) and each step's timed
    target forward, which the sizing follows (`observe`; `forward_costs.TimedForwards`)."""

    sizer: Any  # .choice(config) -> Choice; .forward_timed(tokens, seconds)

    def describe(self, config: DecodeConfig) -> dict:
        return self.sizer.choice(config).describe()

    def target_forward_timed(self, tokens: int, seconds: float) -> None:
        """Each step's timed target forward, for the costs the tree is sized with."""
        self.sizer.forward_timed(tokens, seconds)

    def observe(self, out: TargetOutput, path: list[int], seconds: float | None = None) -> None:
        """The step's timed forward over the pending token and the tree: the sizing follows
        the machine."""
        if seconds is not None:
            self.target_forward_timed(len(out.logits), seconds)
