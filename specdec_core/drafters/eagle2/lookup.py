"""EAGLE-2 + prompt lookup: the head's draft tree with the n-gram chain merged in as a branch.

    tree  = EAGLE-2's tree (drafters/eagle2/drafter.py)
    chain = prompt_lookup(ids, k, ngram_max)      (drafters/ngram.py; may be empty)
    walk the chain from the root: where the tree already has the chain's token among the
    current node's children, follow that node; otherwise add the token as a new child

The merge is a post-processing of a proposal, pure functions of their inputs (`merge_chain`,
`merge_proposal`: drafters/eagle2/merge.py, shared with `eagle2-suffix`) and `merge_lookup`,
the hook `Eagle2Drafter(head, model, post=merge_lookup)` runs on each tree
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

from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.forward_costs import ForwardCosts
from specdec_core.decoding.proposal import Proposal
from specdec_core.drafters.eagle2.drafter import Eagle2Drafter
from specdec_core.drafters.eagle2.merge import MERGED_SCORE, merge_chain, merge_proposal
from specdec_core.drafters.ngram import prompt_lookup
from specdec_core.drafters.tree_sizing import AcceptanceEstimates
from specdec_core.heads.eagle.head import EagleHead

__all__ = ["LOOKUP_SCORE", "Eagle2LookupDrafter", "merge_chain", "merge_lookup"]

LOOKUP_SCORE = MERGED_SCORE  # score of a node only the lookup proposed


def merge_lookup(ids: list[int], config: DecodeConfig, tree: Proposal) -> Proposal:
    """The post-processing `eagle2-lookup` gives `Eagle2Drafter`: the head's tree plus the
    prompt-lookup chain of the committed `ids` (up to `config.k` tokens)."""
    return merge_proposal(tree, Proposal(tokens=prompt_lookup(ids, config.k, config.ngram_max)))


class Eagle2LookupDrafter(Eagle2Drafter):
    """`Eagle2Drafter` with `merge_lookup` as its post-processing."""

    name = "eagle2-lookup"

    def __init__(
        self,
        head: EagleHead,
        target_model,
        costs: ForwardCosts | None = None,
        acceptance: AcceptanceEstimates | None = None,
    ) -> None:
        super().__init__(head, target_model, merge_lookup, costs, acceptance)
