"""EAGLE-2's greedy tree growth: beam search by the head's own confidence, then a global rerank.

    root     = top-k of the head's distribution after the last committed token
    repeat depth − 1 times:
        run the head on the k beam nodes (tree mask over its own cache)
        each beam node's top-k children, scored by cumulative log-prob
        next beam = the global top-k of those k·k children
    tree     = the best `total_tokens − 1` of all candidates, sorted parents first (`rerank`)

In: the head, its KV cache holding one row per committed (feature, token) pair, the root (the
head's hidden state [h] and draft-vocabulary logits [Vd] after the last pair), a `TreeShape`
and the drafter's `Laps` (the head's passes, logits included, are timed as "head", the rest
between them as "tree"). Out: a deterministic tree `Proposal` (target-vocabulary tokens,
parents, scores = cumulative log-probs; no q, no draws). Invariants: parents come before their
children, no two siblings share a token, a child never scores above its parent, and the cache
is left as it was found (the beam rows are truncated again). The functions own no state; the
drafter that calls them (drafters/eagle2/drafter.py) does, and docs/architecture.md shows the whole
decode loop.

`beam_step` is the one head step over a beam that growth, sampled growth (drafters/
eagle2_sampled.py) and the head timing for tree sizing (drafters/eagle2/sizing.py) all run.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from specdec_core.decoding import attention_mask, kv_cache
from specdec_core.decoding.proposal import Proposal
from specdec_core.decoding.step_clock import Laps
from specdec_core.drafters.tree_sizing import TreeShape
from specdec_core.heads.eagle.head import EagleHead, HeadOutput

Root = tuple[torch.Tensor, torch.Tensor]  # the head's (hidden [h], logits [Vd]) after the prefix


def beam_step(
    head: EagleHead,
    cache: DynamicCache,
    features: torch.Tensor,  # [b, h] the hidden state each beam node continues
    tokens: torch.Tensor,  # [b] target ids of the beam nodes
    seen: torch.Tensor,  # [b, r] bool: beam node sees drafted head row r (its path, itself)
    prefix: int,  # cached rows of committed pairs; every beam node sees all of them
    depth: int,  # tree level of the beam nodes (1 = the root's children)
) -> HeadOutput:
    """The head over the beam at `depth` (positions prefix + depth − 1), appended to `cache`."""
    mask = attention_mask.after_prefix(seen, prefix, head.fc.weight.dtype, tokens.device)
    positions = torch.full((1, len(tokens)), prefix + depth - 1, device=tokens.device)
    return head.step(features[None], tokens[None], positions, mask, cache)


@torch.inference_mode()
def grow(
    head: EagleHead, cache: DynamicCache, root: Root, shape: TreeShape, laps: Laps
) -> Proposal:
    """The EAGLE-2 tree of `shape` after `root`: top-k beam search, then the best nodes."""
    prefix = kv_cache.cache_length(cache)
    try:
        tokens, parents, scores = _beam_search(head, cache, root, shape, prefix, laps)
    finally:
        kv_cache.truncate(cache, prefix)
    return Proposal(tokens=tokens, parents=parents, scores=scores)


def _beam_search(head, cache, root: Root, shape: TreeShape, prefix: int, laps: Laps):
    k = shape.topk
    hidden, logits = root  # [h], [Vd]
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
        beam_tokens = head.target_ids(torch.cat(draft_ids)[beam])
        seen = torch.cat([seen, torch.eye(k, dtype=torch.bool)], dim=1)  # [k, r + k]
        laps.lap("tree")
        out = beam_step(head, cache, beam_in, beam_tokens, seen, prefix, level)
        logits = out.logits[0]  # [k, Vd]
        laps.lap("head")
        child = logits.float().log_softmax(-1).topk(k)  # [k, k]
        cumulative = (torch.cat(scores)[beam][:, None] + child.values).flatten()  # [k*k]
        offset = sum(len(s) for s in scores)
        draft_ids.append(child.indices.flatten())
        scores.append(cumulative)
        parents.append(beam.repeat_interleave(k))
        best = cumulative.topk(k).indices  # [k] next beam, as children of this level
        beam = offset + best
        beam_in = out.hidden[0][best // k]  # [k, h]
        seen = seen[(best // k).cpu()]
    return rerank(
        head.target_ids(torch.cat(draft_ids)), torch.cat(scores), torch.cat(parents), shape.nodes
    )


def rerank(
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
