"""DFlash chain drafting: one non-causal pass of the block drafter drafts the whole chain.

The drafter's context cache holds every committed token but the pending one (as the target's
KV cache does): `begin` adds the prompt's features, `commit` the rows of the previous pending
token and the accepted drafts. `propose` runs the block [pending, MASK × (block − 1)] once and
reads its rows 1.. as the chain: at temperature 0 each row's argmax; above it each row's token
is sampled from its own distribution q (the target's temperature and top-p applied to the
drafter's logits) and q is returned, so the lossless chain rule stays exact (a row's draw does
not depend on the other rows' tokens, and none depends on the target).

The block length is the method parameter `block` (0: the drafter's trained `block_size`); a
shorter block drafts fewer tokens in the same kind of pass.
"""

from __future__ import annotations

import torch

from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.proposal import EMPTY, Proposal
from specdec_core.decoding.sampling import probs, sample
from specdec_core.decoding.step_clock import Laps
from specdec_core.decoding.target import TargetOutput
from specdec_core.errors import SpecdecError
from specdec_core.heads.dflash.draft import ContextCache, DFlashDraft
from specdec_core.loop.drafter import Drafter

PARAMS: tuple[tuple[str, float], ...] = (("block", 0.0),)  # 0 = the drafter's block_size


def context_features(out: TargetOutput) -> torch.Tensor:
    """[n, F] the drafter's context features: its target layers' inputs, in fc's order."""
    return torch.cat(out.layer_hidden, dim=-1)


class DFlashDrafter(Drafter):
    name = "dflash"

    def __init__(self, draft: DFlashDraft) -> None:
        self.draft = draft
        self.feature_layers = draft.spec.feature_layers
        self.cache = ContextCache(draft.spec.layers)
        self.parts: dict[str, float] = {}

    def block_length(self, config: DecodeConfig) -> int:
        """Rows of a block for `config`: the pending token and the slots that draft."""
        trained = self.draft.spec.block_size
        block = config.method_int("block", 0, self.name) or trained
        if not 2 <= block <= trained:
            raise SpecdecError(
                f"--method-param block={block}: this DFlash drafter drafts blocks of 2 to "
                f"{trained} rows (its block_size); choose one in that range, or 0 for {trained}"
            )
        return block

    def describe(self, config: DecodeConfig) -> dict:
        return {"block": self.block_length(config)}

    def begin(self, ids: list[int], features: TargetOutput) -> None:
        self.cache = ContextCache(self.draft.spec.layers)
        self._extend(features)

    @torch.inference_mode()
    def block_logits(self, ids: list[int], config: DecodeConfig, laps: Laps) -> torch.Tensor:
        """[block − 1, V] logits of the tokens after the pending one ids[-1], from one pass."""
        block = self.block_length(config)
        rows = self.draft.block(
            self.cache, [ids[-1]] + [self.draft.spec.mask_token_id] * (block - 1)
        )
        logits = self.draft.logits(rows[1:])
        laps.lap("block")
        return logits

    @torch.inference_mode()
    def propose(self, ids: list[int], config: DecodeConfig, generator: torch.Generator) -> Proposal:
        if self.cache.length != len(ids) - 1:
            self.parts = {}
            return EMPTY
        laps = Laps(self.draft.fc.weight.device)
        logits = self.block_logits(ids, config, laps)
        q = probs(logits, config.temperature, config.top_p)  # one-hot rows at temperature 0
        tokens = q.argmax(-1).tolist() if config.greedy else [sample(row, generator) for row in q]
        laps.lap("tokens")
        self.parts = laps.take()
        return Proposal(tokens=tokens, q=q)

    def draft_parts(self) -> dict[str, float]:
        """The latest propose's block pass with its logits ("block") and choosing the tokens
        ("tokens")."""
        return self.parts

    def commit(self, ids: list[int], accepted: int, features: TargetOutput) -> None:
        self._extend(features)

    @torch.inference_mode()
    def _extend(self, features: TargetOutput) -> None:
        self.draft.extend(self.cache, context_features(features), self.cache.length)
