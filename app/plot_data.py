"""Per-run series for the live plots, accumulated from `Step` events (no Qt).

- acceptance length of a step = tokens it emitted (accepted drafts + correction/bonus); the
  running mean of it is τ so far (new tokens / target forwards).
- tokens/s over time: cumulative tokens ÷ cumulative engine time (draft + verify), plotted
  against that time.
- acceptance rate at draft position i = steps accepting > i drafts ÷ steps drafting > i.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specdec_core.decoding.events import DraftTree, Step


@dataclass
class Series:
    name: str
    color: str
    steps: list[int] = field(default_factory=list)
    accept: list[int] = field(default_factory=list)
    mean: list[float] = field(default_factory=list)
    time: list[float] = field(default_factory=list)
    tps: list[float] = field(default_factory=list)
    accepted_at: list[int] = field(default_factory=list)
    drafted_at: list[int] = field(default_factory=list)
    tokens: int = 0
    seconds: float = 0.0
    last_tree: DraftTree | None = None

    def add_step(self, step: Step) -> None:
        emitted = len(step.tokens)
        self.tokens += emitted
        self.seconds += step.draft_seconds + step.verify_seconds
        self.steps.append(len(self.steps))
        self.accept.append(emitted)
        self.mean.append(self.tokens / len(self.steps))
        self.time.append(self.seconds)
        self.tps.append(self.tokens / self.seconds if self.seconds > 0 else 0.0)
        depth = tree_depth(step.tree) if step.tree is not None else step.drafted
        _count(self.drafted_at, depth)
        _count(self.accepted_at, step.accepted)
        self.last_tree = step.tree

    def position_rates(self) -> list[float]:
        return [
            a / d if d else 0.0 for a, d in zip(self.accepted_at, self.drafted_at, strict=False)
        ]


def tree_depth(tree: DraftTree) -> int:
    return max(node_depths(tree.parents), default=0)


def node_depths(parents: tuple[int, ...]) -> list[int]:
    """Depth of each node (1 = child of the root); parents come first."""
    depths: list[int] = []
    for parent in parents:
        depths.append(depths[parent] + 1 if parent >= 0 else 1)
    return depths


def _count(counts: list[int], n: int) -> None:
    counts.extend([0] * max(0, n - len(counts)))
    for i in range(n):
        counts[i] += 1
