"""What a drafter proposes and the verifiers judge: a chain of tokens or a tree of them.

The record both sides read (drafters/ writes it, verifiers/ and the decode loop read it): the
drafted tokens, the distributions they were drawn from (None: deterministic drafts), and for
a tree each node's parent and, for a sampled tree, the order its nodes were drawn in. A chain
is the tree whose node j hangs under node j - 1, so `parent_of`, `children` and `depth` read
both alike.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Proposal:
    tokens: list[int]  # drafted token ids (chain order, or tree nodes with parents first)
    q: torch.Tensor | None = None  # [n, V] draft distributions the tokens were drawn from
    parents: tuple[int, ...] | None = None  # tree: parent node index per node (-1 = root)
    scores: tuple[float, ...] = ()  # tree: cumulative log-prob per node (display)
    # sampled tree: node indices in the order they were drawn (a node drawn twice appears
    # twice), each from its q row; None = deterministic children (verifiers/tree.py)
    draws: tuple[int, ...] | None = None

    @property
    def is_tree(self) -> bool:
        return self.parents is not None

    @property
    def parent_of(self) -> tuple[int, ...]:
        """Each node's parent (-1 = the root, the pending token); a chain's node j hangs under
        node j - 1."""
        if self.parents is not None:
            return self.parents
        return tuple(range(-1, len(self.tokens) - 1))

    def children(self, distinct: bool = False) -> dict[int, list[int]]:
        """Node -> its children in the order the lossless rule tries them (the `draws` order of
        a sampled tree, where a node drawn twice is tried twice unless `distinct`); -1 is the
        root."""
        parents = self.parent_of
        order = self.draws if self.draws is not None else range(len(self.tokens))
        children: dict[int, list[int]] = {}
        for node in order:
            siblings = children.setdefault(parents[node], [])
            if not distinct or node not in siblings:
                siblings.append(node)
        return children

    def depth(self) -> int:
        """Drafted positions on the longest root-to-leaf path (a chain's length)."""
        if not self.is_tree:
            return len(self.tokens)
        depths: list[int] = []
        for parent in self.parents:
            depths.append(depths[parent] + 1 if parent >= 0 else 1)
        return max(depths, default=0)


EMPTY = Proposal(tokens=[])
