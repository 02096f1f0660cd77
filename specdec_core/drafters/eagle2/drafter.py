"""EAGLE-2: a dynamic draft tree grown by the EAGLE head's own confidence (Li et al., EMNLP 2024).

The drafter composes three parts and owns the state between them:

- the tree size (`TreeSizer`, drafters/eagle2/sizing.py): the shape for a `DecodeConfig`,
  given or sized for this device, re-sized from how often the target takes the head's top-1;
  the measured costs (`costs`, which follow the timed target forwards the decode loop hands
  over: `target_forward_timed`, forward_costs.TimedForwards) and the learned acceptance
  (`acceptance`) are the caller's to own and share between its drafters (a run, a benchmark,
  an engine); a drafter given none has a pair of its own;
- the growth (pure functions): greedy beam search and rerank at temperature 0
  (drafters/eagle2/growth.py), i.i.d. draws at T > 0 for the verifier's recursive rejection
  sampling (drafters/eagle2/sampled.py);
- an optional post-processing of each proposal (`post`: e.g. merging the prompt-lookup chain
  in, drafters/eagle2/lookup.py), a pure function (ids, config, tree) -> proposal that may
  append nodes after the head's and must keep parents first.

State: the head's KV cache holds one row per committed pair (f_t, x_{t+1}) for
t < len(ids) − 1, exactly like the target's cache, and `root` is the head's (hidden, logits)
after the last pair. Growth appends beam rows and truncates them again; `commit` feeds the
target's own rows for the accepted path (the previous pending token and the accepted drafts),
so after a step both caches equal a fresh prefill of the accepted sequence. Works with
EAGLE-1/2 and EAGLE-3 heads. The decode loop around it: docs/architecture.md.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from specdec_core.decoding import kv_cache
from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.forward_costs import ForwardCosts
from specdec_core.decoding.proposal import EMPTY, Proposal
from specdec_core.decoding.step_clock import Laps
from specdec_core.decoding.target import TargetOutput
from specdec_core.drafters.eagle import feature_layers, head_features
from specdec_core.drafters.eagle2.growth import Root, grow
from specdec_core.drafters.eagle2.sampled import grow_sampled
from specdec_core.drafters.eagle2.sizing import TreeSizer
from specdec_core.drafters.tree_sizing import AcceptanceEstimates, SizedByCosts
from specdec_core.heads.eagle.head import EagleHead
from specdec_core.loop.drafter import Drafter

# (committed ids, config, the head's tree) -> the proposal to verify
PostProcess = Callable[[list[int], DecodeConfig, Proposal], Proposal]


class Eagle2Drafter(SizedByCosts, Drafter):
    name = "eagle2"

    def __init__(
        self,
        head: EagleHead,
        target_model,
        post: PostProcess | None = None,
        costs: ForwardCosts | None = None,
        acceptance: AcceptanceEstimates | None = None,
    ) -> None:
        self.head = head
        self.target_model = target_model
        self.post = post
        self.feature_layers = feature_layers(head, int(target_model.config.num_hidden_layers))
        self.sizer = TreeSizer(
            head,
            target_model,
            costs if costs is not None else ForwardCosts(),
            acceptance if acceptance is not None else AcceptanceEstimates(),
        )
        self.cache = head.new_cache()
        self.root: Root | None = None  # head (hidden [h], logits [Vd]) after the last pair
        self.parts: dict[str, float] = {}  # the latest propose's seconds by part

    def begin(self, ids: list[int], features: TargetOutput) -> None:
        self.cache = self.head.new_cache()
        self.root = None
        self._feed(features, ids[1:])

    def propose(self, ids: list[int], config: DecodeConfig, generator: torch.Generator) -> Proposal:
        laps = Laps(self.head.fc.weight.device)
        tree = self._grow(config, generator, laps)
        laps.lap("tree")
        proposal = tree
        if self.post is not None:
            proposal = self.post(ids, config, tree)
            laps.lap("merge")
        self.sizer.proposed(proposal.tokens, proposal.parents, len(tree.tokens))
        laps.lap("tree")
        self.parts = laps.take()
        return proposal

    def draft_parts(self) -> dict[str, float]:
        """The latest propose's head passes ("head"), tree growth around them ("tree") and
        post-processing ("merge": lookup or suffix search and the merge)."""
        return self.parts

    def commit(self, ids: list[int], accepted: int, features: TargetOutput) -> None:
        self._feed(features, ids[len(ids) - accepted - 1 :])
        self.sizer.observe(ids, accepted)

    def _grow(self, config: DecodeConfig, generator: torch.Generator, laps: Laps) -> Proposal:
        if self.root is None:  # a one-token prompt: no (feature, token) pair yet
            return EMPTY
        shape = self.sizer.choice(config).shape
        if config.greedy:
            return grow(self.head, self.cache, self.root, shape, laps)
        return grow_sampled(
            self.head,
            self.cache,
            self.root,
            shape,
            config.temperature,
            config.top_p,
            generator,
            laps,
        )

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
