"""EAGLE-2 + prompt lookup: the head's draft tree with the n-gram chain merged in as a branch.

    tree  = EAGLE-2's tree (drafters/eagle2.py)
    chain = prompt_lookup(ids, k, ngram_max)      (drafters/ngram.py; may be empty)
    walk the chain from the root: where the tree already has the chain's token among the
    current node's children, follow that node; otherwise add the token as a new child

The merge is a post-processing of a proposal, pure functions of their inputs: `merge_chain`
(tokens, parents, scores), `merge_proposal` (a whole `Proposal`, q and draws included) and
`merge_lookup`, the hook `Eagle2Drafter(head, model, post=merge_lookup)` runs on each tree
(`Eagle2LookupDrafter` is that drafter under its own name). The head's nodes keep their
indices and come first; the added ones follow, parents first.

The two drafters are right in different places. The head is weakest where the answer repeats
its context (a summary quoting the article, code reusing names, arithmetic restating the
question's numbers), and there prompt lookup copies whole spans for free; the head is right
on fresh text where lookup has no match. The merged tree is verified in the same single target
forward. Merged nodes are never duplicate siblings, and the whole tree depends only on the
committed tokens, so the lossless tree verifier (verifiers/tree.py) keeps the target's output
at temperature 0 and its distribution above. This combination is ours, not EAGLE's; `eagle2`
stays the paper's algorithm. Nodes the head did not draft carry the score -inf (no head
log-prob); the tree size chosen for the head is unchanged, the chain adds up to k nodes. At
T > 0, where the head's children are drawn from its distribution, the lookup nodes are
deterministic children tried after the drawn ones (verifiers/tree.py handles both).
"""

from __future__ import annotations

import torch

from specdec_core.config import DecodeConfig
from specdec_core.drafters.base import Proposal
from specdec_core.drafters.eagle2 import Eagle2Drafter
from specdec_core.drafters.ngram import prompt_lookup
from specdec_core.eagle.head import EagleHead

LOOKUP_SCORE = float("-inf")  # score of a node only the lookup proposed


def merge_chain(
    tokens: list[int], parents: tuple[int, ...], scores: tuple[float, ...], chain: list[int]
) -> tuple[list[int], tuple[int, ...], tuple[float, ...]]:
    """The tree plus `chain` as a root-to-leaf path, sharing the nodes it already has.

    New nodes are appended, so parents still come first and existing indices stay valid.
    """
    tokens, parents, scores = list(tokens), list(parents), list(scores)
    node = -1
    for token in chain:
        match = next(
            (c for c, parent in enumerate(parents) if parent == node and tokens[c] == token), None
        )
        if match is None:
            tokens.append(token)
            parents.append(node)
            scores.append(LOOKUP_SCORE)
            match = len(tokens) - 1
        node = match
    return tokens, tuple(parents), tuple(scores)


def merge_proposal(tree: Proposal, chain: list[int]) -> Proposal:
    """`tree` with `chain` merged in (`merge_chain`); `tree` itself when the chain is empty.

    In a sampled tree (T > 0, `draws` set) the lookup nodes are deterministic children, tried
    after the drawn ones, with a one-hot q row.
    """
    if not chain:
        return tree
    tokens, parents, scores = merge_chain(tree.tokens, tree.parents or (), tree.scores, chain)
    if tree.draws is None:
        return Proposal(tokens=tokens, parents=parents, scores=scores)
    added = torch.tensor(tokens[len(tree.tokens) :], device=tree.q.device, dtype=torch.long)
    one_hot = torch.nn.functional.one_hot(added, tree.q.shape[-1]).to(tree.q.dtype)
    return Proposal(
        tokens=tokens,
        q=torch.cat([tree.q, one_hot]),
        parents=parents,
        scores=scores,
        draws=(*tree.draws, *range(len(tree.tokens), len(tokens))),
    )


def merge_lookup(ids: list[int], config: DecodeConfig, tree: Proposal) -> Proposal:
    """The post-processing `eagle2-lookup` gives `Eagle2Drafter`: the head's tree plus the
    prompt-lookup chain of the committed `ids` (up to `config.k` tokens)."""
    return merge_proposal(tree, prompt_lookup(ids, config.k, config.ngram_max))


class Eagle2LookupDrafter(Eagle2Drafter):
    """`Eagle2Drafter` with `merge_lookup` as its post-processing."""

    name = "eagle2-lookup"

    def __init__(self, head: EagleHead, target_model) -> None:
        super().__init__(head, target_model, post=merge_lookup)
