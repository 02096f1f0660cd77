"""EAGLE-1 chain drafting: autoregression on the target's features, the token one step ahead.

The head's KV cache holds one row per pair (f_t, x_{t+1}) at position t: the target's feature
of token t and the token that follows it. With a committed sequence ids[0..n-1] (ids[n-1]
pending), the cache covers t = 0..n-2 and the last row's output predicts f_{n-1} and, through
the lm_head, the first draft token. `propose` then feeds its own predicted features back
(pairs (f̂, d_i)) for k-1 more steps; `commit` truncates those guesses and runs the head over the
target's true features for the accepted tokens, so the cache again holds only real pairs.

q = sampling.probs(head logits) with the target's temperature / top-p (draft tokens outside a
reduced draft vocabulary get q = 0), which keeps the lossless verifier exact.
"""

from __future__ import annotations

import torch

from specdec_core.decoding import kv_cache
from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.proposal import EMPTY, Proposal
from specdec_core.decoding.sampling import probs, sample
from specdec_core.decoding.step_clock import Laps
from specdec_core.decoding.target import TargetOutput
from specdec_core.errors import SpecdecError
from specdec_core.heads.eagle.head import EagleHead, fused_layers
from specdec_core.loop.drafter import Drafter


def feature_layers(head: EagleHead, target_layers: int) -> tuple[int, ...]:
    """Target layers whose inputs an EAGLE-3 head reads, in its fc's order; none for EAGLE-1."""
    if head.kind != "eagle3":
        return ()
    named = head.variant.aux_layers  # by its config.json; else the official choice
    if not all(0 <= layer < target_layers for layer in named):
        raise SpecdecError(
            f"this EAGLE-3 head reads the inputs of target layers {list(named)} "
            f"(eagle_aux_hidden_state_layer_ids) but the target has {target_layers} layers; "
            "use a head trained for this target"
        )
    return named or fused_layers(target_layers)


def head_features(head: EagleHead, out: TargetOutput) -> torch.Tensor:
    """[n, F] features the head expects from a target output."""
    if head.kind == "eagle3":
        return torch.cat(out.layer_hidden, dim=-1)  # [n, fused * h]
    return out.hidden  # [n, h]


class EagleDrafter(Drafter):
    name = "eagle"

    def __init__(self, head: EagleHead, target_layers: int) -> None:
        self.head = head
        self.feature_layers = feature_layers(head, target_layers)
        self.cache = head.new_cache()
        self.last: tuple[torch.Tensor, torch.Tensor] | None = None  # ([1,1,h], [Vd]) prediction
        self.parts: dict[str, float] = {}  # the latest propose's seconds by part

    def begin(self, ids: list[int], features: TargetOutput) -> None:
        self.cache = self.head.new_cache()
        self.last = None
        self._advance(head_features(self.head, features), ids[1:], start=0)

    @torch.inference_mode()
    def propose(self, ids: list[int], config: DecodeConfig, generator: torch.Generator) -> Proposal:
        if self.last is None or config.k <= 0:
            self.parts = {}
            return EMPTY
        device = self.last[1].device
        laps = Laps(device)
        # the pair (f̂_{n-1}, d_1) sits at position n-1
        tokens, rows = self._chain(len(ids) - 1, config, generator, laps)
        proposal = Proposal(tokens=tokens, q=self._q(tokens, rows, device))
        laps.lap("tokens")
        self.parts = laps.take()
        return proposal

    def draft_parts(self) -> dict[str, float]:
        """The latest propose's head passes and logits ("head") and the rest: choosing the
        tokens and their q ("tokens")."""
        return self.parts

    def _chain(
        self, position: int, config: DecodeConfig, generator: torch.Generator, laps: Laps
    ) -> tuple[list[int], list[torch.Tensor]]:
        """k draft tokens, the first from the pair at `position`, and the q rows they were
        drawn from (none at temperature 0)."""
        hidden, logits = self.last
        tokens, rows = [], []
        for i in range(config.k):
            if config.greedy:  # argmax in the draft vocabulary; q is one-hot (built in _q)
                token = int(self.head.target_ids(logits.argmax(-1)))
            else:
                q = probs(self.head.to_target(logits), config.temperature, config.top_p)  # [V]
                token = sample(q, generator)
                rows.append(q)
            tokens.append(token)
            if i + 1 < config.k:
                laps.lap("tokens")
                out = self._step(hidden, [token], position + i)
                hidden, logits = out.hidden[:, -1:], out.logits[0, -1]
                laps.lap("head")
        return tokens, rows

    def _q(self, tokens: list[int], rows: list[torch.Tensor], device: torch.device) -> torch.Tensor:
        """[k, V] q of the drafted tokens: the sampled rows, or at temperature 0 one-hot rows
        (one [k, V] allocation, not k rows and a stacked copy)."""
        if rows:
            return torch.stack(rows)
        q = torch.zeros(len(tokens), self.head.config.vocab_size, device=device)
        q[torch.arange(len(tokens)), tokens] = 1.0
        return q

    def commit(self, ids: list[int], accepted: int, features: TargetOutput) -> None:
        start = len(ids) - accepted - 2  # position of the previous pending token
        kv_cache.truncate(self.cache, min(start, kv_cache.cache_length(self.cache)))
        self._advance(head_features(self.head, features), ids[start + 1 :], start)

    @torch.inference_mode()
    def _advance(self, features: torch.Tensor, next_tokens: list[int], start: int) -> None:
        """Run real pairs (features[i], next_tokens[i]) at positions start.. into the cache."""
        if len(next_tokens) == 0:
            return
        out = self._step(features[None], next_tokens, start)
        self.last = (out.hidden[:, -1:], self.head.logits(out.hidden[0, -1]))

    def _step(self, features: torch.Tensor, tokens: list[int], start: int):
        device = features.device
        token_ids = torch.tensor([tokens], device=device)  # [1, n]
        positions = torch.arange(start, start + len(tokens), device=device)[None]  # [1, n]
        return self.head.step(features, token_ids, positions, None, self.cache)
