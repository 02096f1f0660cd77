"""Adaptive draft length: a drafter wrapper that lets k follow acceptance.

    after a fully accepted draft:  k <- min(k + 1, k_max)
    after a rejection:             k <- max(k - 1, 1)

This is the additive form of transformers' "heuristic" schedule for assisted generation: when
the drafter keeps being right, draft further; when it is wrong, waste less. k starts at
`config.k` for every generation and is capped at `k_max = max(8, 2 · config.k)`.

Selected with `DecodeConfig.k_schedule = "adaptive"` (`--k-schedule adaptive`); `generate`
wraps the drafter through `apply_schedule`, so the decode loop itself is unchanged. Only
chain drafts have a k: a tree proposal passes through untouched. Lossless verification stays
lossless — only how many tokens are proposed changes, never how they are judged.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.events import DrafterStatus
from specdec_core.decoding.proposal import Proposal
from specdec_core.decoding.target import Target, TargetOutput
from specdec_core.errors import SpecdecError
from specdec_core.loop.drafter import Drafter

SCHEDULES = ("fixed", "adaptive")
K_MAX_FLOOR = 8


class AdaptiveK(Drafter):
    """`inner` with k following acceptance; everything else is the inner drafter's."""

    def __init__(self, inner: Drafter, k: int) -> None:
        self.inner = inner
        self.name = inner.name
        self.feature_layers = inner.feature_layers
        self.k_start = max(1, k)
        self.k_max = max(K_MAX_FLOOR, 2 * self.k_start)
        self.k = self.k_start
        self.drafted = 0  # chain tokens proposed in the current step (0 for a tree or none)
        self.history: list[int] = []  # k used at each step, for display and tests

    def describe(self, config: DecodeConfig) -> dict[str, Any]:
        return self.inner.describe(config)

    def draft_parts(self) -> dict[str, float]:
        return self.inner.draft_parts()

    def attach(self, target: Target) -> None:
        self.inner.attach(target)

    def observe(self, out: TargetOutput, path: list[int], seconds: float | None = None) -> None:
        self.inner.observe(out, path, seconds)

    def status(self) -> DrafterStatus | None:
        return self.inner.status()

    def begin(self, ids: list[int], features: TargetOutput) -> None:
        self.k = self.k_start
        self.history = []
        self.inner.begin(ids, features)

    def propose(self, ids: list[int], config: DecodeConfig, generator: torch.Generator) -> Proposal:
        proposal = self.inner.propose(ids, replace(config, k=self.k), generator)
        self.drafted = 0 if proposal.is_tree else len(proposal.tokens)
        self.history.append(self.k)
        return proposal

    def commit(self, ids: list[int], accepted: int, features: TargetOutput) -> None:
        self.inner.commit(ids, accepted, features)
        if not self.drafted:
            return
        if accepted == self.drafted:
            self.k = min(self.k + 1, self.k_max)
        else:
            self.k = max(self.k - 1, 1)


def apply_schedule(drafter: Drafter, config: DecodeConfig) -> Drafter:
    """`drafter` as `config.k_schedule` asks: unchanged ("fixed") or wrapped ("adaptive")."""
    if config.k_schedule not in SCHEDULES:
        raise SpecdecError(
            f"unknown k schedule '{config.k_schedule}'; choose one of: {', '.join(SCHEDULES)}"
        )
    if config.k_schedule == "fixed" or config.k < 1:
        return drafter
    return AdaptiveK(drafter, config.k)
