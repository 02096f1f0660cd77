"""EAGLE-2 + suffix decoding: the head's draft tree with the history's suffix tree merged in.

    tree   = EAGLE-2's tree (drafters/eagle2/drafter.py)
    suffix = the most frequent continuations of the context's longest suffix in the history
             and the context itself (drafters/suffix.py): a tree of up to k nodes, depth k
    merged = merge_proposal(tree, suffix)               (drafters/eagle2/merge.py)

The same post-processing as `eagle2-lookup`, with a frequency-weighted tree over every earlier
run of a suffix method in this process instead of one chain copied from the prompt. The
drafter also records its run in the history (`SuffixSource`: the record opened at `begin`,
updated at every `commit`). The merged tree depends only on the committed tokens and the
history as it was when the run began, so the lossless tree verifier keeps the target's output
(temperature 0) and its distribution (above). This combination is ours, not EAGLE's.
"""

from __future__ import annotations

from collections.abc import Hashable

from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.forward_costs import ForwardCosts
from specdec_core.decoding.proposal import Proposal
from specdec_core.decoding.target import TargetOutput
from specdec_core.drafters.eagle2.drafter import Eagle2Drafter
from specdec_core.drafters.eagle2.merge import merge_proposal
from specdec_core.drafters.suffix import History, SuffixSource
from specdec_core.drafters.tree_sizing import AcceptanceEstimates
from specdec_core.heads.eagle.head import EagleHead


class Eagle2SuffixDrafter(Eagle2Drafter):
    """`Eagle2Drafter` whose post-processing merges the suffix tree of `SuffixSource`."""

    name = "eagle2-suffix"

    def __init__(
        self,
        head: EagleHead,
        target_model,
        key: Hashable,
        history: History | None = None,
        costs: ForwardCosts | None = None,
        acceptance: AcceptanceEstimates | None = None,
    ) -> None:
        self.source = SuffixSource(key, history)
        super().__init__(head, target_model, self.merge_suffix, costs, acceptance)

    def merge_suffix(self, ids: list[int], config: DecodeConfig, tree: Proposal) -> Proposal:
        return merge_proposal(tree, self.source.tree(ids, config.k))

    def begin(self, ids: list[int], features: TargetOutput) -> None:
        self.source.begin(ids)
        super().begin(ids, features)

    def commit(self, ids: list[int], accepted: int, features: TargetOutput) -> None:
        super().commit(ids, accepted, features)
        self.source.commit(ids)
