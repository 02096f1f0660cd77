"""EAGLE-2: a dynamic draft tree grown by the EAGLE head's own confidence (Li et al., EMNLP 2024).

    root     = top-k of the head's distribution after the last committed token
    repeat depth − 1 times:
        run the head on the k beam nodes (tree mask over its own cache)
        each beam node's top-k children, scored by cumulative log-prob
        next beam = the global top-k of those k·k children
    tree     = the best `total_tokens − 1` of all candidates, sorted parents first

At T > 0 (`_grow_sampled`) each expanded node's children are instead top-k i.i.d. draws from
the head's distribution, all kept (no final rerank), for the verifier's recursive rejection
sampling (verifiers/tree.py); the beam is chosen the same way.

The head's cache holds one row per committed pair (f_t, x_{t+1}) for t < len(ids) − 1, exactly
like the target's cache; drafting appends the beam rows, each seeing the cached prefix, its
ancestors and itself (positions = prefix length + depth − 1), and `propose` truncates them
again. `commit` feeds the target's own rows for the accepted path (the previous pending token
and the accepted drafts), so after a step both caches equal a fresh prefill of the accepted
sequence. The tree shape comes from `DecodeConfig` or, where a dimension is None, from the
measured costs of this device and how often the target takes this head's top-1 (refitted every
RESIZE_STEPS steps, `tree_sizing`). Works with EAGLE-1/2 and EAGLE-3 heads.
"""

from __future__ import annotations

import math

import torch

from specdec_core import attention_mask, kv_cache, tree_sizing
from specdec_core.config import DecodeConfig
from specdec_core.drafters.base import EMPTY, Drafter, Proposal
from specdec_core.drafters.eagle import feature_layers, head_features
from specdec_core.eagle.head import EagleHead
from specdec_core.sampling import probs, sample_many
from specdec_core.target import TargetOutput
from specdec_core.tree_sizing import Choice, TreeShape

RESIZE_STEPS = 16  # tree steps between refits of the acceptance estimate (auto size only)


class Eagle2Drafter(Drafter):
    name = "eagle2"

    def __init__(self, head: EagleHead, target_model) -> None:
        self.head = head
        self.target_model = target_model
        self.feature_layers = feature_layers(head, int(target_model.config.num_hidden_layers))
        self.cache = head.new_cache()
        self.root: tuple[torch.Tensor, torch.Tensor] | None = None  # head (hidden [h], logits [Vd])
        self._choices: dict[tuple, Choice] = {}  # (depth, top-k, tokens) asked -> chosen
        self._config = DecodeConfig()
        self._tally = (0, 0, 0)  # (steps, levels verified, top-1 hits) since the last re-size
        self._last: tuple[list[int], tuple[int, ...], int] | None = None  # tree, head nodes
        self._timing_cache = None  # head cache of a dummy prefix, for `_time_head_step`

    # -- tree size -------------------------------------------------------------------------
    def describe(self, config: DecodeConfig) -> dict:
        return self.choice(config).describe()

    def choice(self, config: DecodeConfig) -> Choice:
        """The tree shape for `config`: given dimensions, the rest sized for this device."""
        key = (config.tree_depth, config.tree_topk, config.tree_tokens)
        if key not in self._choices:
            if all(key):
                shape = tree_sizing.capped(TreeShape(*key))
                reason = "given"
                if shape.total_tokens < config.tree_tokens:
                    reason = (
                        f"given; {config.tree_tokens} tokens capped at {shape.total_tokens}: "
                        f"depth {shape.depth} x top-k {shape.topk} yields {shape.nodes} nodes"
                    )
                self._choices[key] = Choice(shape, tree_sizing.expected_tau(shape), None, reason)
            else:
                costs = tree_sizing.Costs(
                    target=tree_sizing.measure_target(self.target_model),
                    head=tree_sizing.measure_head(self._head_key(), self._time_head_step),
                )
                alpha1 = tree_sizing.acceptance(self._acceptance_key(config))
                self._choices[key] = tree_sizing.choose(costs, alpha1, *key)
        self._config = config
        return self._choices[key]

    def _observe(self, ids: list[int], accepted: int) -> None:
        """Count top-1 hits per verified level; every RESIZE_STEPS steps refit α₁, re-size."""
        config = self._config
        key = (config.tree_depth, config.tree_topk, config.tree_tokens)
        if all(key) or self._last is None:
            return
        trials, hits = head_levels(*self._last, ids[len(ids) - accepted - 1 :])
        self._tally = (self._tally[0] + 1, self._tally[1] + trials, self._tally[2] + hits)
        if self._tally[0] < RESIZE_STEPS or not self._tally[1]:
            return
        alpha1 = tree_sizing.observe(self._acceptance_key(config), *self._tally[1:])
        self._choices[key] = tree_sizing.choose(self._choices[key].costs, alpha1, *key)
        self._tally = (0, 0, 0)

    # -- the drafter protocol --------------------------------------------------------------
    def begin(self, ids: list[int], features: TargetOutput) -> None:
        self.cache = self.head.new_cache()
        self.root = None
        self._feed(features, ids[1:])

    @torch.inference_mode()
    def propose(self, ids: list[int], config: DecodeConfig, generator: torch.Generator) -> Proposal:
        if self.root is None:  # a one-token prompt: no (feature, token) pair yet
            self._last = None
            return EMPTY
        shape = self.choice(config).shape
        prefix = kv_cache.cache_length(self.cache)
        try:
            if config.greedy:
                tokens, parents, scores = self._grow(shape, prefix)
                proposal = Proposal(tokens=tokens, parents=parents, scores=scores)
            else:
                proposal = self._grow_sampled(shape, prefix, config, generator)
        finally:
            kv_cache.truncate(self.cache, prefix)
        self._last = (proposal.tokens, proposal.parents, len(proposal.tokens))
        return proposal

    def commit(self, ids: list[int], accepted: int, features: TargetOutput) -> None:
        self._feed(features, ids[len(ids) - accepted - 1 :])
        self._observe(ids, accepted)

    # -- internals -------------------------------------------------------------------------
    @torch.inference_mode()
    def _feed(self, features: TargetOutput, tokens: list[int]) -> None:
        """Append the pairs (target feature f_t, token x_{t+1}) to the head's cache."""
        if not tokens:
            return
        feature = head_features(self.head, features)  # [n, F]
        start = kv_cache.cache_length(self.cache)
        device = feature.device
        positions = torch.arange(start, start + len(tokens), device=device)
        ids = torch.tensor(tokens, device=device)
        out = self.head.step(feature[None], ids[None], positions[None], None, self.cache)
        self.root = (out.hidden[0, -1], self.head.logits(out.hidden[0, -1]))

    def _grow(self, shape: TreeShape, prefix: int) -> tuple[list[int], tuple[int, ...], tuple]:
        k = shape.topk
        hidden, logits = self.root  # [h], [Vd]
        device = logits.device
        top = logits.float().log_softmax(-1).topk(min(k, logits.shape[-1]))
        k = top.indices.numel()
        draft_ids = [top.indices]  # per level: candidates' draft-vocabulary ids
        scores = [top.values]  # per level: cumulative log-probs
        parents = [torch.full((k,), -1, device=device)]  # per level: parent candidate index
        beam = torch.arange(k, device=device)  # global candidate index of each beam node
        beam_in = hidden.expand(k, -1)  # [k, h] the hidden state each beam node continues
        seen = torch.zeros(k, 0, dtype=torch.bool)  # [k, r] beam node sees drafted head row r
        for level in range(1, shape.depth):
            beam_tokens = self.head.target_ids(torch.cat(draft_ids)[beam])
            seen = torch.cat([seen, torch.eye(k, dtype=torch.bool)], dim=1)  # [k, r + k]
            mask = attention_mask.after_prefix(seen, prefix, self._dtype(), device)
            positions = torch.full((1, k), prefix + level - 1, device=device)
            out = self.head.step(beam_in[None], beam_tokens[None], positions, mask, self.cache)
            child = out.logits[0].float().log_softmax(-1).topk(k)  # [k, k]
            cumulative = (torch.cat(scores)[beam][:, None] + child.values).flatten()  # [k*k]
            offset = sum(len(s) for s in scores)
            draft_ids.append(child.indices.flatten())
            scores.append(cumulative)
            parents.append(beam.repeat_interleave(k))
            best = cumulative.topk(k).indices  # [k] next beam, as children of this level
            beam = offset + best
            beam_in = out.hidden[0][best // k]  # [k, h]
            seen = seen[(best // k).cpu()]
        return _select(
            self.head.target_ids(torch.cat(draft_ids)),
            torch.cat(scores),
            torch.cat(parents),
            shape.nodes,
        )

    def _grow_sampled(
        self, shape: TreeShape, prefix: int, config: DecodeConfig, generator: torch.Generator
    ) -> Proposal:
        """T > 0: every expanded node's children are `topk` i.i.d. draws from the head's q.

        The beam (which nodes to expand next: the `topk` most likely of the newest level, by
        cumulative log q) is chosen as in `_grow`, but every drawn child stays in the tree,
        since the verifier's rule needs all of a node's draws (verifiers/tree.py). A token
        drawn twice is one node drawn twice, so a confident head makes a smaller tree.
        """
        k = shape.topk
        tokens: list[int] = []
        parents: list[int] = []
        scores: list[float] = []
        q_rows: list[torch.Tensor] = []
        draws: list[int] = []
        continues: list[torch.Tensor] = []  # per node: the head hidden state it was drawn after
        sees: dict[int, list[int]] = {-1: []}  # per expanded node: head rows it and its path use

        def expand(parent: int, logits: torch.Tensor, hidden: torch.Tensor) -> list[int]:
            q = probs(self.head.to_target(logits), config.temperature, config.top_p)  # [V]
            base = scores[parent] if parent >= 0 else 0.0
            new: dict[int, int] = {}
            for token in sample_many(q, k, generator):
                if token not in new:
                    new[token] = len(tokens)
                    tokens.append(token)
                    parents.append(parent)
                    scores.append(base + math.log(float(q[token])))
                    q_rows.append(q)
                    continues.append(hidden)
                draws.append(new[token])
            return list(new.values())

        hidden, logits = self.root  # [h], [Vd]
        level = expand(-1, logits, hidden)
        rows = 0
        dtype, device = self._dtype(), logits.device
        for depth in range(1, shape.depth):
            beam = sorted(level, key=lambda node: -scores[node])[:k]
            seen = torch.zeros(len(beam), rows + len(beam), dtype=torch.bool)
            for j, node in enumerate(beam):
                sees[node] = [*sees[parents[node]], rows + j]
                seen[j, sees[node]] = True
            rows += len(beam)
            mask = attention_mask.after_prefix(seen, prefix, dtype, device)
            positions = torch.full((1, len(beam)), prefix + depth - 1, device=device)
            features = torch.stack([continues[node] for node in beam])[None]  # [1, b, h]
            beam_tokens = torch.tensor([tokens[node] for node in beam], device=device)[None]
            out = self.head.step(features, beam_tokens, positions, mask, self.cache)
            child_logits = self.head.logits(out.hidden[0])  # [b, Vd]
            level = []
            for j, node in enumerate(beam):
                level += expand(node, child_logits[j], out.hidden[0, j])
        return Proposal(
            tokens=tokens,
            q=torch.stack(q_rows),
            parents=tuple(parents),
            scores=tuple(scores),
            draws=tuple(draws),
        )

    def _dtype(self) -> torch.dtype:
        return self.head.fc.weight.dtype

    def _head_key(self) -> tuple:
        return (id(self.head), self.head.kind, self.head.draft_vocab, str(self._dtype()))

    def _acceptance_key(self, config: DecodeConfig) -> tuple:
        return (*self._head_key(), config.temperature, config.top_p)

    @torch.inference_mode()
    def _time_head_step(self, k: int) -> None:
        """One beam step over k rows after a 128-row prefix, as `_grow` runs it (for sizing).

        The prefix is cached once (`_timing_cache`) and the k rows are truncated again, so
        only the beam step itself is timed.
        """
        device = self.head.fc.weight.device
        h = self.head.config.hidden_size
        prefix = 128
        if self._timing_cache is None:
            self._timing_cache = self.head.new_cache()
            feature = torch.zeros(1, prefix, h, device=device, dtype=self._dtype())
            tokens = torch.zeros(1, prefix, dtype=torch.long, device=device)
            positions = torch.arange(prefix, device=device)[None]
            self.head.step(feature, tokens, positions, None, self._timing_cache)
        feature = torch.zeros(1, k, h, device=device, dtype=self._dtype())
        tokens = torch.zeros(1, k, dtype=torch.long, device=device)
        positions = torch.full((1, k), prefix, device=device)
        mask = attention_mask.after_prefix(
            torch.eye(k, dtype=torch.bool), prefix, self._dtype(), device
        )
        out = self.head.step(feature, tokens, positions, mask, self._timing_cache)
        out.logits[0].float().log_softmax(-1).topk(k)
        kv_cache.truncate(self._timing_cache, prefix)


def head_levels(
    tokens: list[int], parents: tuple[int, ...], head_nodes: int, path: list[int]
) -> tuple[int, int]:
    """(tree levels the target verified, how many of them took the head's top-1 child).

    `path`: the accepted drafts, then the target's own next token. A level counts while the
    current node has children from the head (nodes below `head_nodes`; the head's top-1 is
    the first child); a path that continues on nodes the head did not draft stops counting.
    """
    node, trials, hits = -1, 0, 0
    for token in path:
        children = [c for c, parent in enumerate(parents) if parent == node]
        if not children or children[0] >= head_nodes:
            break
        trials += 1
        hits += tokens[children[0]] == token
        node = next((c for c in children if tokens[c] == token), None)
        if node is None:
            break
    return trials, hits


def _select(
    tokens: torch.Tensor,  # [c] target ids of every candidate, level by level
    scores: torch.Tensor,  # [c] cumulative log-probs
    parents: torch.Tensor,  # [c] global candidate index of the parent, -1 = root
    nodes: int,
) -> tuple[list[int], tuple[int, ...], tuple[float, ...]]:
    """The best `nodes` candidates, parents first, with parents re-indexed into the selection.

    A child never scores above its parent and comes later, so a stable sort on the score
    keeps every selected node's parent selected too.
    """
    order = torch.sort(-scores, stable=True).indices[:nodes]
    chosen = order.sort().values  # candidate order is level order: parents first
    index = {int(c): i for i, c in enumerate(chosen)}
    tree_parents = tuple(index[int(p)] if p >= 0 else -1 for p in parents[chosen])
    return tokens[chosen].tolist(), tree_parents, tuple(scores[chosen].tolist())
