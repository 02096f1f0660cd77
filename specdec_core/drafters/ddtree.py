"""DDTree: a best-first draft tree grown from one DFlash pass (no retraining).

One block pass gives a distribution for each of the next `block − 1` positions, each made
without knowing the tokens drafted before it. A path of the tree picks one token per position;
its score is the sum of its tokens' log-probabilities, the probability that the whole path is
right if the positions were independent. The best `nodes` paths (prefix-closed: a node's
parent is always in) are found best-first with a heap: start from the best token of position 1;
each node popped is added to the tree and pushes its next sibling (the same parent, the next
token of its position) and its first child (the best token of the next position). Scores only
fall along both pushes, so the nodes come out in the order of their scores, parents first.

The tree's children are deterministic (q one-hot), so the existing lossless tree rule verifies
it exactly (verifiers/tree.py): at temperature 0 the walk follows the target's argmax, above it
each child x is accepted with probability r(x), r renormalised without it on rejection.

The node budget is `--tree-tokens` (counting the root, as EAGLE-2's) or, where it is auto,
chosen at every step from the scores themselves and the measured target forward costs: the
budget that maximises expected tokens per second, (1 + Σᵢ₌₁ⁿ P(node i on the accepted
path)) / (draft pass + target forward over n + 1 tokens), with P taken as exp(score): the
drafter's own probabilities, taken at their word.
"""

from __future__ import annotations

import heapq
import math

import torch

from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.forward_costs import ForwardCosts, interpolate
from specdec_core.decoding.proposal import EMPTY, Proposal
from specdec_core.decoding.step_clock import Laps
from specdec_core.decoding.target import TargetOutput
from specdec_core.drafters.dflash import DFlashDrafter
from specdec_core.heads.dflash.draft import DFlashDraft

MAX_NODES = 63  # the largest auto budget (64 tokens with the root), as EAGLE's 60
PASS_MEMORY = 0.8  # weight of the past in the block pass's running time


def best_first(logprobs: torch.Tensor, nodes: int) -> tuple[list[int], list[int], list[float]]:
    """The `nodes` best prefix-closed paths over per-position log-probabilities [P, V]:
    (token, parent, score) per node, parents first, scores non-increasing."""
    width = min(nodes, logprobs.shape[-1])
    top = torch.topk(logprobs, width, dim=-1)
    values, ids = top.values.tolist(), top.indices.tolist()
    positions = len(values)
    tokens: list[int] = []
    parents: list[int] = []
    scores: list[float] = []
    # (−score, node order tiebreak, position, rank, parent node, parent's score)
    heap = [(-values[0][0], 0, 0, 0, -1, 0.0)]
    pushed = 1
    while heap and len(tokens) < nodes:
        negative, _, position, rank, parent, base = heapq.heappop(heap)
        node, score = len(tokens), -negative
        tokens.append(ids[position][rank])
        parents.append(parent)
        scores.append(score)
        following = []
        if rank + 1 < width:  # the next sibling
            following.append((base + values[position][rank + 1], position, rank + 1, parent, base))
        if position + 1 < positions:  # the first child
            following.append((score + values[position + 1][0], position + 1, 0, node, score))
        for value, *rest in following:
            heapq.heappush(heap, (-value, pushed, *rest))
            pushed += 1
    return tokens, parents, scores


def best_budget(scores: list[float], draft_seconds: float, target: dict[int, float]) -> int:
    """Nodes (a prefix of best-first `scores`) with the most expected tokens per second."""
    best, best_rate, expected = 1, 0.0, 1.0
    for n, score in enumerate(scores, start=1):
        expected += math.exp(score)
        rate = expected / (draft_seconds + interpolate(target, n + 1))
        if rate > best_rate:
            best, best_rate = n, rate
    return best


class DDTreeDrafter(DFlashDrafter):
    name = "ddtree"

    def __init__(self, draft: DFlashDraft, model, costs: ForwardCosts) -> None:
        super().__init__(draft)
        self.model = model  # the target model, whose forward costs size the tree
        self.costs = costs
        self.pass_seconds: float | None = None  # running time of one block pass
        self.last_nodes = 0

    def describe(self, config: DecodeConfig) -> dict:
        budget = "auto" if config.tree_tokens is None else config.tree_tokens
        return {"block": self.block_length(config), "tree_tokens": budget}

    @torch.inference_mode()
    def propose(self, ids: list[int], config: DecodeConfig, generator: torch.Generator) -> Proposal:
        if self.cache.length != len(ids) - 1:
            self.parts = {}
            return EMPTY
        laps = Laps(self.draft.fc.weight.device)
        start = laps.mark
        logits = self.block_logits(ids, config, laps)
        self._time_pass(laps.mark - start)
        temperature = 1.0 if config.greedy else config.temperature
        logprobs = torch.log_softmax(logits / temperature, dim=-1)
        if config.tree_tokens is not None:
            nodes = max(1, config.tree_tokens - 1)
            tokens, parents, scores = best_first(logprobs, nodes)
        else:
            tokens, parents, scores = best_first(logprobs, MAX_NODES)
            nodes = best_budget(scores, self.pass_seconds or 0.0, self.costs.target(self.model))
            tokens, parents, scores = tokens[:nodes], parents[:nodes], scores[:nodes]
        self.last_nodes = len(tokens)
        laps.lap("tree")
        self.parts = laps.take()
        return Proposal(tokens=tokens, parents=tuple(parents), scores=tuple(scores))

    def _time_pass(self, seconds: float) -> None:
        if self.pass_seconds is None:
            self.pass_seconds = seconds
        else:
            self.pass_seconds = PASS_MEMORY * self.pass_seconds + (1 - PASS_MEMORY) * seconds

    def draft_parts(self) -> dict[str, float]:
        """The latest propose's block pass ("block") and growing the tree ("tree")."""
        return self.parts

    def observe(self, out: TargetOutput, path: list[int], seconds: float | None = None) -> None:
        """The step's timed forward over the pending token and the tree: the budget follows
        the machine."""
        if seconds is not None and out.logits is not None:
            self.costs.observe_target(self.model, len(out.logits), seconds)
