"""MLP speculator chain drafting: the target's last hidden state and the pending token run
through the speculator's stages, each drafting one token (specdec_core/mlp_speculator).

Between steps the target's cache holds every committed token but the pending one, ids[-1]. The
drafter keeps the target's final-norm hidden state of ids[-2] (the last row of the prefill's
features, then of each `commit`'s rows): the state whose next token is ids[-1], what vLLM
passes as `previous_hidden_states` with ids[-1] as the input token. Stage 0 stands on ids[-1]
and drafts the token after it; stage i stands on the draft of stage i - 1. A chain has
k = min(config.k, n_predict) tokens: a speculator has no stage past its last.

At temperature 0 each draft is its stage's argmax (q = None, a deterministic draft); above it
each is sampled from q = sampling.probs(stage logits) at the run's temperature and top-p, and
the q rows go with the proposal, which keeps the lossless verifier exact.
"""

from __future__ import annotations

from typing import Any

import torch

from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.proposal import EMPTY, Proposal
from specdec_core.decoding.sampling import probs, sample
from specdec_core.decoding.target import TargetOutput
from specdec_core.heads.mlp_speculator.head import MLPSpeculator
from specdec_core.loop.drafter import Drafter
from specdec_core.models.loading import LoadedModel


class MLPSpeculatorDrafter(Drafter):
    name = "mlp-speculator"

    def __init__(self, speculator: MLPSpeculator) -> None:
        self.speculator = speculator
        self.hidden: torch.Tensor | None = None  # [h] the target's state of ids[-2]

    def describe(self, config: DecodeConfig) -> dict[str, Any]:
        """The chain length actually drafted, where the speculator's stages cap config.k."""
        if config.k > self.speculator.n_predict:
            return {"k_drafted": self.speculator.n_predict}
        return {}

    def begin(self, ids: list[int], features: TargetOutput) -> None:
        self.hidden = features.hidden[-1] if len(features.hidden) else None

    @torch.inference_mode()
    def propose(self, ids: list[int], config: DecodeConfig, generator: torch.Generator) -> Proposal:
        k = min(config.k, self.speculator.n_predict)
        if self.hidden is None or k <= 0:
            return EMPTY
        speculator = self.speculator
        state = speculator.first_state(self.hidden[None])  # [1, h]
        token = torch.tensor([ids[-1]], device=self.hidden.device)
        tokens: list[int] = []
        rows: list[torch.Tensor] = []
        for stage in range(k):
            state, logits = speculator.step(stage, state, token)
            if config.greedy:
                drafted = int(logits[0].argmax())
            else:
                q = probs(logits[0], config.temperature, config.top_p)  # [V]
                drafted = sample(q, generator)
                rows.append(q)
            tokens.append(drafted)
            token = torch.tensor([drafted], device=token.device)
        return Proposal(tokens=tokens, q=torch.stack(rows) if rows else None)

    def commit(self, ids: list[int], accepted: int, features: TargetOutput) -> None:
        self.hidden = features.hidden[-1]  # the state of ids[-2], whose next token is ids[-1]


def build(
    target: LoadedModel,
    speculator: object,
    history: object = None,
    costs: object = None,
    acceptance: object = None,
) -> Drafter:
    """The method registry's builder: (target, the loaded speculator, the suffix history,
    forward costs, acceptance estimates; the last three unused) -> the drafter."""
    assert isinstance(speculator, MLPSpeculator)
    return MLPSpeculatorDrafter(speculator)
