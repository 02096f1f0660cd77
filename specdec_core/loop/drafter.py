"""The drafter interface: propose tokens, then hear what the target accepted.

Two methods, as transformers' `CandidateGenerator`: `propose` and `commit`. A drafter keeps
whatever state it needs (its own KV cache, features) and must roll it back on `commit`.
Drafters subclass `Drafter` and so inherit the defaults of what they may declare:
`feature_layers` (none), `describe(config)` (nothing chosen), which reports settings the
drafter chose itself (EAGLE-2's tree size) for the `Started` event's and the summary's config,
and `draft_parts()` (no split), where its latest `propose`'s time went (EAGLE: head forwards,
tree building, merge) for the step's `StepPhases`; `attach(target)` (ignored), the target runner
of the generation, whose model and cache a self-speculative drafter drafts through; and
`observe(out, path, seconds)` (ignored), every row of the step's target forward and how long it
took, where a drafter reads rows it proposed for its own use (lookahead decoding's Jacobi
window) or follows the machine's forward costs (a tree sized by them: EAGLE-2, Medusa); and
`status()` (None), a small `DrafterStatus` the decode loop puts on each step's `Step` (the
layers a self-speculative draft skips, SWIFT's search as it runs, lookahead's n-gram pool).
Every one is declared here, so the loop calls each as it is and asks no drafter what it is.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.events import DrafterStatus
from specdec_core.decoding.proposal import Proposal
from specdec_core.decoding.target import Target, TargetOutput


class Drafter(Protocol):
    name: str
    feature_layers: tuple[int, ...] = ()  # extra target layers whose inputs it needs (EAGLE-3)

    def describe(self, config: DecodeConfig) -> dict[str, Any]:
        """Settings this drafter chose itself for `config` (e.g. a measured tree size)."""
        return {}

    def draft_parts(self) -> dict[str, float]:
        """Seconds of the latest `propose` by part (e.g. head forwards, tree building), where
        this drafter splits it; empty where it does not."""
        return {}

    def status(self) -> DrafterStatus | None:
        """This drafter's state after the latest `commit`, for the step's `Step.status`;
        None where it has nothing to show."""
        return None

    def attach(self, target: Target) -> None:
        """The target runner of this generation, given before `begin`: its model and KV cache
        (the cache holds every committed token but the pending one between steps). A drafter
        that drafts through them must leave the cache as it found it before `propose` returns."""

    def observe(self, out: TargetOutput, path: list[int], seconds: float | None = None) -> None:
        """Every row of this step's target forward (row 0 the pending token, row i + 1 node i),
        the accepted node indices and the forward's seconds (None: not timed), before
        `commit`."""

    def begin(self, ids: list[int], features: TargetOutput) -> None:
        """A new generation: `ids` is the prompt; `features` covers ids[:-1]."""

    def propose(self, ids: list[int], config: DecodeConfig, generator: torch.Generator) -> Proposal:
        """Draft continuations of `ids` (committed tokens, the last one pending)."""

    def commit(self, ids: list[int], accepted: int, features: TargetOutput) -> None:
        """The target accepted `accepted` drafted tokens and appended one of its own.

        `ids` is the new committed sequence; `features` holds the target's rows for the tokens
        ids[-(accepted + 2):-1] (the previous pending token and the accepted drafts).
        """
