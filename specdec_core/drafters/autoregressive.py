"""The baseline drafter: proposes nothing, so each step is one plain target forward."""

from __future__ import annotations

import torch

from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.proposal import EMPTY, Proposal
from specdec_core.decoding.target import TargetOutput
from specdec_core.loop.drafter import Drafter


class AutoregressiveDrafter(Drafter):
    name = "ar"

    def begin(self, ids: list[int], features: TargetOutput) -> None:
        pass

    def propose(self, ids: list[int], config: DecodeConfig, generator: torch.Generator) -> Proposal:
        return EMPTY

    def commit(self, ids: list[int], accepted: int, features: TargetOutput) -> None:
        pass
