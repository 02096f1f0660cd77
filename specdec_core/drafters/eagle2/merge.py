"""Merging a second proposal into an EAGLE-2 tree: shared nodes reused, the rest appended.

    walk the added tree from the root, parents first: where the head's tree already has the
    node's token among its (merged) parent's children, reuse that node; otherwise append the
    token as a new child

Pure functions of their inputs: `merge_tree` (tokens, parents, scores), `merge_chain` (the
added proposal is a chain) and `merge_proposal` (a whole `Proposal`, q and draws included).
The post-processings of `eagle2-lookup` (drafters/eagle2/lookup.py: the prompt-lookup chain)
and `eagle2-suffix` (drafters/eagle2/suffix.py: the suffix tree over the history) are these
functions. The head's nodes keep their indices and come first; the added ones follow, parents
first, and are never duplicate siblings, so the lossless tree verifier (verifiers/tree.py)
keeps the target's output at temperature 0 and its distribution above. Nodes the head did not
draft carry the score -inf (no head log-prob). At T > 0, where the head's children are drawn
from its distribution, the added nodes are deterministic children tried after the drawn ones.
"""

from __future__ import annotations

import torch

from specdec_core.decoding.proposal import Proposal

MERGED_SCORE = float("-inf")  # score of a node only the merged proposal had


def merge_tree(
    tokens: list[int],
    parents: tuple[int, ...],
    scores: tuple[float, ...],
    added: list[int],
    added_parents: tuple[int, ...],
) -> tuple[list[int], tuple[int, ...], tuple[float, ...]]:
    """The tree plus the tree (`added`, `added_parents`: parents first), sharing the nodes it
    already has. New nodes are appended, so parents still come first and indices stay valid."""
    tokens, parents, scores = list(tokens), list(parents), list(scores)
    where: list[int] = []  # merged index of each added node
    for token, parent in zip(added, added_parents, strict=True):
        node = where[parent] if parent >= 0 else -1
        match = next((c for c, p in enumerate(parents) if p == node and tokens[c] == token), None)
        if match is None:
            tokens.append(token)
            parents.append(node)
            scores.append(MERGED_SCORE)
            match = len(tokens) - 1
        where.append(match)
    return tokens, tuple(parents), tuple(scores)


def merge_chain(
    tokens: list[int], parents: tuple[int, ...], scores: tuple[float, ...], chain: list[int]
) -> tuple[list[int], tuple[int, ...], tuple[float, ...]]:
    """The tree plus `chain` as a root-to-leaf path (`merge_tree` of a chain)."""
    return merge_tree(tokens, parents, scores, chain, chain_parents(len(chain)))


def chain_parents(length: int) -> tuple[int, ...]:
    return tuple(range(-1, length - 1))


def merge_proposal(tree: Proposal, added: Proposal) -> Proposal:
    """`tree` with `added` (a chain or a tree) merged in; `tree` itself when `added` is empty.

    In a sampled tree (T > 0, `draws` set) the added nodes are deterministic children, tried
    after the drawn ones, with a one-hot q row.
    """
    if not added.tokens:
        return tree
    added_parents = added.parents if added.is_tree else chain_parents(len(added.tokens))
    tokens, parents, scores = merge_tree(
        tree.tokens, tree.parents or (), tree.scores, added.tokens, added_parents
    )
    if tree.draws is None:
        return Proposal(tokens=tokens, parents=parents, scores=scores)
    new = torch.tensor(tokens[len(tree.tokens) :], device=tree.q.device, dtype=torch.long)
    one_hot = torch.nn.functional.one_hot(new, tree.q.shape[-1]).to(tree.q.dtype)
    return Proposal(
        tokens=tokens,
        q=torch.cat([tree.q, one_hot]),
        parents=parents,
        scores=scores,
        draws=(*tree.draws, *range(len(tree.tokens), len(tokens))),
    )
