"""P-EAGLE drafting: one pass of the head drafts the whole chain of k tokens.

The head's KV cache holds the real pairs (f_t, x_{t+1}) at positions t, as for EAGLE
(drafters/eagle.py). `commit` only notes the pairs the target just verified; `propose` runs
them and k-1 mask rows (`PEagleHead.mask_rows`: the token `mask_token_id` and the learned
`mask_hidden` in place of the target's states) in one causal pass at positions start, ...,
n-1, n, ..., n+k-3, as vLLM's proposer does with `parallel_drafting`. The last real row's
logits give draft 1, mask row i's give draft i+1; then the mask rows are cut from the cache, so
it again holds only real pairs. No draft token enters the pass, so the k distributions are
known before any is sampled.

At temperature 0 each draft is its row's argmax (q one-hot); at T > 0 each is drawn from its
own row, q = sampling.probs(row) with the target's temperature and top-p. Draft i's q does not
depend on drafts 1..i-1, which is still the distribution it was drawn from given them, so the
chain verifier's min(1, p/q) rule is exact and the output lossless.
"""

from __future__ import annotations

import torch

from specdec_core.decoding import kv_cache
from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.proposal import EMPTY, Proposal
from specdec_core.decoding.sampling import probs, sample
from specdec_core.decoding.step_clock import Laps
from specdec_core.decoding.target import TargetOutput
from specdec_core.drafters.eagle import feature_layers, head_features
from specdec_core.heads.eagle.peagle import PEagleHead
from specdec_core.loop.drafter import Drafter


class PEagleDrafter(Drafter):
    name = "peagle"

    def __init__(self, head: PEagleHead, target_layers: int) -> None:
        self.head = head
        self.feature_layers = feature_layers(head, target_layers)
        self.cache = head.new_cache()
        # real pairs not yet run: features [n, F], the tokens after them, the first position
        self.pending: tuple[torch.Tensor, list[int], int] | None = None
        self.parts: dict[str, float] = {}  # the latest propose's seconds by part

    def begin(self, ids: list[int], features: TargetOutput) -> None:
        self.cache = self.head.new_cache()
        self.pending = None
        self._note(head_features(self.head, features), ids[1:], 0)

    def commit(self, ids: list[int], accepted: int, features: TargetOutput) -> None:
        start = len(ids) - accepted - 2  # position of the previous pending token
        kv_cache.truncate(self.cache, min(start, kv_cache.cache_length(self.cache)))
        self._note(head_features(self.head, features), ids[start + 1 :], start)

    def _note(self, features: torch.Tensor, tokens: list[int], start: int) -> None:
        """Keep real pairs for the next pass, after any still waiting (a propose of k = 0)."""
        if not tokens:
            return
        if self.pending is not None:  # they end where the new ones start
            held, held_tokens, held_start = self.pending
            features = torch.cat([held, features])
            tokens, start = [*held_tokens, *tokens], held_start
        self.pending = (features, tokens, start)

    @torch.inference_mode()
    def propose(self, ids: list[int], config: DecodeConfig, generator: torch.Generator) -> Proposal:
        if self.pending is None or config.k <= 0:
            self.parts = {}
            return EMPTY
        features, tokens, start = self.pending
        laps = Laps(features.device)
        logits = self._pass(features, tokens, start, config.k)  # [k, Vd]
        self.pending = None
        laps.lap("head")
        if config.greedy:
            drafts = self.head.target_ids(logits.argmax(-1)).tolist()
            q = torch.zeros(config.k, self.head.config.vocab_size, device=logits.device)
            q[torch.arange(config.k), drafts] = 1.0
        else:
            q = probs(self.head.to_target(logits), config.temperature, config.top_p)  # [k, V]
            drafts = [sample(row, generator) for row in q]
        proposal = Proposal(tokens=drafts, q=q)
        laps.lap("tokens")
        self.parts = laps.take()
        return proposal

    def draft_parts(self) -> dict[str, float]:
        """The latest propose's head pass and logits ("head") and choosing the tokens and
        their q ("tokens")."""
        return self.parts

    def _pass(self, features: torch.Tensor, tokens: list[int], start: int, k: int) -> torch.Tensor:
        """The real pairs and k-1 mask rows in one pass; -> [k, Vd] draft logits. The cache
        keeps the real pairs only."""
        device = features.device
        mask_features, mask_tokens = self.head.mask_rows(k - 1)
        rows = torch.cat([features.to(mask_features.dtype), mask_features])[None]
        token_ids = torch.cat([torch.tensor(tokens, device=device), mask_tokens])[None]
        positions = torch.arange(start, start + token_ids.shape[1], device=device)[None]
        out = self.head.step(rows, token_ids, positions, None, self.cache)
        kv_cache.truncate(self.cache, start + len(tokens))
        return self.head.logits(out.hidden[0, len(tokens) - 1 :])
