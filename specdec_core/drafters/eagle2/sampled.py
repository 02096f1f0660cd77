"""EAGLE-2 at T > 0: a tree of draws from the head's distribution, for recursive rejection sampling.

    root     = `topk` i.i.d. draws from the head's q after the last committed token
    repeat depth − 1 times:
        beam = the `topk` most likely nodes of the newest level, by cumulative log q
        run the head on the beam (tree mask over its own cache)
        each beam node's children = `topk` i.i.d. draws from its own q

In: the head, its KV cache holding one row per committed (feature, token) pair, the root (the
head's hidden state [h] and draft-vocabulary logits [Vd] after the last pair), a `TreeShape`,
the sampling settings, the generator and the drafter's `Laps` (the head's passes and logits
timed as "head", the rest as "tree"). Out: a sampled tree `Proposal`: tokens, parents,
scores (cumulative log q), q [n, V] (row i: the distribution node i was drawn from, in the
target vocabulary, after temperature and top-p) and draws (node indices in draw order).
Invariants: every drawn child stays in the tree (no rerank: the verifier's rule needs all of
a node's draws, verifiers/tree.py); a token drawn twice under one parent is one node listed
twice in `draws`, so a confident head makes a smaller tree; parents come before their
children; the cache is left as it was found. No state is kept here (drafters/eagle2/drafter.py owns
it; docs/architecture.md shows the whole decode loop).
"""

from __future__ import annotations

import math

import torch
from transformers import DynamicCache

from specdec_core.decoding import kv_cache
from specdec_core.decoding.proposal import Proposal
from specdec_core.decoding.sampling import probs, sample_many
from specdec_core.decoding.step_clock import Laps
from specdec_core.drafters.eagle2.growth import Root, beam_step
from specdec_core.drafters.tree_sizing import TreeShape
from specdec_core.heads.eagle.head import EagleHead


@torch.inference_mode()
def grow_sampled(
    head: EagleHead,
    cache: DynamicCache,
    root: Root,
    shape: TreeShape,
    temperature: float,
    top_p: float,
    generator: torch.Generator,
    laps: Laps,
) -> Proposal:
    """The sampled tree of `shape` after `root` (see the module docstring)."""
    prefix = kv_cache.cache_length(cache)
    try:
        return _SampledTree(head, shape.topk, temperature, top_p, generator).grow(
            cache, root, shape.depth, prefix, laps
        )
    finally:
        kv_cache.truncate(cache, prefix)


class _SampledTree:
    """The tree as it is drawn: one list entry per node, parents first."""

    def __init__(self, head, topk: int, temperature: float, top_p: float, generator) -> None:
        self.head, self.topk, self.generator = head, topk, generator
        self.temperature, self.top_p = temperature, top_p
        self.tokens: list[int] = []
        self.parents: list[int] = []
        self.scores: list[float] = []
        self.q_rows: list[torch.Tensor] = []
        self.draws: list[int] = []
        self.continues: list[torch.Tensor] = []  # per node: the head hidden state it follows

    def expand(self, parent: int, logits: torch.Tensor, hidden: torch.Tensor) -> list[int]:
        """Draw `topk` children of `parent` from q = probs(logits); return the new nodes."""
        q = probs(self.head.to_target(logits), self.temperature, self.top_p)  # [V]
        base = self.scores[parent] if parent >= 0 else 0.0
        new: dict[int, int] = {}
        for token in sample_many(q, self.topk, self.generator):
            if token not in new:
                new[token] = len(self.tokens)
                self.tokens.append(token)
                self.parents.append(parent)
                self.scores.append(base + math.log(float(q[token])))
                self.q_rows.append(q)
                self.continues.append(hidden)
            self.draws.append(new[token])
        return list(new.values())

    def grow(self, cache, root: Root, depth: int, prefix: int, laps: Laps) -> Proposal:
        hidden, logits = root  # [h], [Vd]
        level = self.expand(-1, logits, hidden)
        sees: dict[int, list[int]] = {-1: []}  # per expanded node: head rows its path uses
        rows = 0
        device = logits.device
        for level_depth in range(1, depth):
            beam = sorted(level, key=lambda node: -self.scores[node])[: self.topk]
            seen = torch.zeros(len(beam), rows + len(beam), dtype=torch.bool)
            for j, node in enumerate(beam):
                sees[node] = [*sees[self.parents[node]], rows + j]
                seen[j, sees[node]] = True
            rows += len(beam)
            features = torch.stack([self.continues[node] for node in beam])  # [b, h]
            tokens = torch.tensor([self.tokens[node] for node in beam], device=device)
            laps.lap("tree")
            out = beam_step(self.head, cache, features, tokens, seen, prefix, level_depth)
            child_logits = self.head.logits(out.hidden[0])  # [b, Vd]
            laps.lap("head")
            level = []
            for j, node in enumerate(beam):
                level += self.expand(node, child_logits[j], out.hidden[0, j])
        return Proposal(
            tokens=self.tokens,
            q=torch.stack(self.q_rows),
            parents=tuple(self.parents),
            scores=tuple(self.scores),
            draws=tuple(self.draws),
        )
