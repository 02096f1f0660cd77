"""EAGLE-2's tree size online: the shape per decode config, re-sized as the head proves itself.

In: a head and its target model; per step, the tree proposed (`proposed`: its tokens and
parents, the head's own nodes first) and what the target accepted (`observe`). Out:
`choice(config)`, a `tree_sizing.Choice` (shape, expected τ, why). Where `DecodeConfig` gives
all three dimensions (depth, top-k, tokens) the shape is that one, capped at what its beam can
yield; where any is None the rest is sized by `tree_sizing.choose` from the measured costs of
this device (the target's forwards, measured once by `costs`, a `forward_costs.ForwardCosts`,
then following the steps' own forward timings, `forward_timed`; and `time_head_step`: the
head's beam step as growth runs it, measured once) and the head's top-1 acceptance α₁,
refitted (with the target table as it then is) from the tallied tree levels every RESIZE_STEPS
steps (kept per head and sampling settings by `acceptance`, a
`tree_sizing.AcceptanceEstimates`). Both belong to whoever built
the sizer (a run, a benchmark, an engine), so a size never depends on what else ran in the
process. Invariant: the choice for a config changes only at a refit; a given shape never
changes. The cost model itself is in tree_sizing.py; the decode loop: docs/architecture.md.
"""

from __future__ import annotations

import torch

from specdec_core.decoding import kv_cache
from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.forward_costs import Costs, ForwardCosts
from specdec_core.drafters import tree_sizing
from specdec_core.drafters.eagle2.growth import beam_step
from specdec_core.drafters.tree_sizing import AcceptanceEstimates, Choice, TreeShape
from specdec_core.heads.eagle.head import EagleHead

RESIZE_STEPS = 16  # tree steps between refits of the acceptance estimate (auto size only)
TIMING_PREFIX = 128  # cached head rows under a timed beam step (a short chat prompt)


class TreeSizer:
    def __init__(
        self,
        head: EagleHead,
        target_model,
        costs: ForwardCosts,
        acceptance: AcceptanceEstimates,
    ) -> None:
        self.head = head
        self.target_model = target_model
        self.costs = costs  # the device's forward and head-step costs (the target's followed)
        self.acceptance = acceptance  # each head's learned top-1 acceptance
        self.timing_cache = None  # head cache of a dummy prefix, for `time_head_step`
        self._choices: dict[tuple, Choice] = {}  # (depth, top-k, tokens) asked -> chosen
        self._config = DecodeConfig()  # the config of the latest `choice`
        self._tally = (0, 0, 0)  # (steps, levels verified, top-1 hits) since the last re-size
        self._last: tuple[list[int], tuple[int, ...], int] | None = None  # tree, head nodes

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
                alpha1 = self.acceptance.acceptance(self.acceptance_key(config))
                self._choices[key] = tree_sizing.choose(self.sizing_costs(), alpha1, *key)
        self._config = config
        return self._choices[key]

    def proposed(self, tokens: list[int], parents: tuple[int, ...] | None, head_nodes: int):
        """The tree just proposed; nodes below `head_nodes` are the head's (the rest added)."""
        self._last = (tokens, parents or (), head_nodes) if tokens else None

    def observe(self, ids: list[int], accepted: int) -> None:
        """Count top-1 hits per verified level; every RESIZE_STEPS steps refit α₁, re-size."""
        config = self._config
        key = (config.tree_depth, config.tree_topk, config.tree_tokens)
        if all(key) or self._last is None:
            return
        trials, hits = head_levels(*self._last, ids[len(ids) - accepted - 1 :])
        self._tally = (self._tally[0] + 1, self._tally[1] + trials, self._tally[2] + hits)
        if self._tally[0] < RESIZE_STEPS or not self._tally[1]:
            return
        alpha1 = self.acceptance.observe(self.acceptance_key(config), *self._tally[1:])
        self._choices[key] = tree_sizing.choose(self.sizing_costs(), alpha1, *key)
        self._tally = (0, 0, 0)

    def forward_timed(self, tokens: int, seconds: float) -> None:
        """A step's target forward over `tokens` tokens took `seconds`: the target table the
        next refit (or the owner's next run) sizes with follows it."""
        self.costs.observe_target(self.target_model, tokens, seconds)

    def sizing_costs(self) -> Costs:
        """The costs in use now: the target table as the steps so far left it, the head's."""
        return self.costs.for_sizing(self.target_model, self.head_key(), self.time_head_step)

    def head_key(self) -> tuple:
        """The head's identity in the cost and acceptance owners' tables."""
        head = self.head
        return (id(head), head.kind, head.draft_vocab, str(head.fc.weight.dtype))

    def acceptance_key(self, config: DecodeConfig) -> tuple:
        """α₁ is kept per head and sampling settings."""
        return (*self.head_key(), config.temperature, config.top_p)

    @torch.inference_mode()
    def time_head_step(self, k: int) -> None:
        """One beam step over k rows after a TIMING_PREFIX-row prefix, as growth runs it.

        The prefix is cached once (`timing_cache`) and the k rows are truncated again, so
        only the beam step itself is timed.
        """
        head, prefix = self.head, TIMING_PREFIX
        device, dtype = head.fc.weight.device, head.fc.weight.dtype
        h = head.config.hidden_size
        if self.timing_cache is None:
            self.timing_cache = head.new_cache()
            feature = torch.zeros(1, prefix, h, device=device, dtype=dtype)
            tokens = torch.zeros(1, prefix, dtype=torch.long, device=device)
            positions = torch.arange(prefix, device=device)[None]
            head.step(feature, tokens, positions, None, self.timing_cache)
        feature = torch.zeros(k, h, device=device, dtype=dtype)
        tokens = torch.zeros(k, dtype=torch.long, device=device)
        seen = torch.eye(k, dtype=torch.bool)
        out = beam_step(head, self.timing_cache, feature, tokens, seen, prefix, depth=1)
        out.logits[0].float().log_softmax(-1).topk(k)
        kv_cache.truncate(self.timing_cache, prefix)


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
