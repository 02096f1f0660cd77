"""The baseline drafter: proposes nothing, so each step is one plain target forward."""

from __future__ import annotations

import torch

from specdec_core.config import DecodeConfig
from specdec_core.drafters.base import EMPTY, Proposal
from specdec_core.target import TargetOutput


class AutoregressiveDrafter:
    name = "ar"
    needs_features = False
    feature_layers: tuple[int, ...] = ()

    def begin(self, ids: list[int], features: TargetOutput) -> None:
        pass

    def propose(self, ids: list[int], config: DecodeConfig, generator: torch.Generator) -> Proposal:
        return EMPTY

    def commit(self, ids: list[int], accepted: int, features: TargetOutput) -> None:
        pass
