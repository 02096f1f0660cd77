"""Adaptive k: the wrapper grows k after full acceptance, shrinks it after a rejection, and
changes nothing about what is accepted (greedy output still equals autoregressive)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.proposal import Proposal
from specdec_core.errors import SpecdecError
from specdec_core.loop.adaptive import AdaptiveK, apply_schedule
from specdec_core.loop.drafter import Drafter
from specdec_core.run.runner import run
from tests.tiny import prompt


class Recorder(Drafter):
    """A chain drafter that proposes `config.k` copies of token 3 and records each k."""

    name = "recorder"

    def __init__(self) -> None:
        self.ks: list[int] = []

    def begin(self, ids, features) -> None:
        pass

    def propose(self, ids, config, generator) -> Proposal:
        self.ks.append(config.k)
        return Proposal(tokens=[3] * config.k)

    def commit(self, ids, accepted, features) -> None:
        pass


def test_k_grows_after_full_acceptance_and_shrinks_after_rejection():
    inner = Recorder()
    drafter = AdaptiveK(inner, k=3)
    config = DecodeConfig(k=3)
    generator = torch.Generator()
    drafter.begin([1], None)
    for accepted_of in (lambda k: k, lambda k: k, lambda k: 0, lambda k: k - 1):
        proposal = drafter.propose([1], config, generator)
        drafter.commit([1], accepted_of(len(proposal.tokens)), None)
    assert inner.ks == [3, 4, 5, 4]
    assert drafter.k == 3 and drafter.name == "recorder"
    drafter.begin([1], None)
    assert drafter.k == 3  # every generation starts from config.k


def test_k_stays_within_one_and_k_max():
    drafter = AdaptiveK(Recorder(), k=1)
    for _ in range(3):
        drafter.propose([1], DecodeConfig(k=1), torch.Generator())
        drafter.commit([1], 0, None)
    assert drafter.k == 1
    for _ in range(20):
        proposal = drafter.propose([1], DecodeConfig(k=1), torch.Generator())
        drafter.commit([1], len(proposal.tokens), None)
    assert drafter.k == drafter.k_max == 8


def test_schedule_selection():
    inner = Recorder()
    assert apply_schedule(inner, DecodeConfig()) is inner
    assert isinstance(apply_schedule(inner, DecodeConfig(k_schedule="adaptive")), AdaptiveK)
    with pytest.raises(SpecdecError, match="schedule"):
        apply_schedule(inner, DecodeConfig(k_schedule="sometimes"))


def test_adaptive_greedy_output_equals_autoregressive(tiny_target, tiny_draft):
    config = DecodeConfig(max_new_tokens=24, k=2)
    ar = run(tiny_target, "ar", prompt(), config)
    adaptive = replace(config, k_schedule="adaptive")
    summary = run(tiny_target, "classic", prompt(), adaptive, extra=tiny_draft)
    assert summary.token_ids == ar.token_ids
    assert summary.config["k_schedule"] == "adaptive"
