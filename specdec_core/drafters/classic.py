"""Classic speculative decoding: a small causal LM with the target's tokenizer drafts k tokens.

The draft keeps its own KV cache. It always covers a prefix of the committed tokens; `propose`
feeds whatever committed tokens it has not seen yet plus the pending one, then drafts k tokens
autoregressively, sampling from q = probs(draft logits) with the same temperature / top-p as
the target. `commit` truncates the cache back to the accepted prefix.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from specdec_core.decoding import kv_cache
from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.proposal import Proposal
from specdec_core.decoding.sampling import probs, sample
from specdec_core.decoding.target import TargetOutput
from specdec_core.loop.drafter import Drafter


class ClassicDrafter(Drafter):
    name = "classic"

    def __init__(self, draft: PreTrainedModel, target_vocab: int) -> None:
        self.draft = draft
        self.target_vocab = target_vocab
        self.cache = kv_cache.new_cache(draft.config)

    def begin(self, ids: list[int], features: TargetOutput) -> None:
        self.cache = kv_cache.new_cache(self.draft.config)

    @torch.inference_mode()
    def propose(self, ids: list[int], config: DecodeConfig, generator: torch.Generator) -> Proposal:
        tokens: list[int] = []
        rows: list[torch.Tensor] = []
        feed = ids[kv_cache.cache_length(self.cache) :]
        for _ in range(config.k):
            q = probs(self._logits(feed), config.temperature, config.top_p)  # [V]
            token = sample(q, generator) if not config.greedy else int(q.argmax())
            tokens.append(token)
            rows.append(q)
            feed = [token]
        return Proposal(tokens=tokens, q=torch.stack(rows) if rows else None)

    def commit(self, ids: list[int], accepted: int, features: TargetOutput) -> None:
        # the cache may hold rejected drafts; keep at most the committed tokens before pending
        length = min(kv_cache.cache_length(self.cache), len(ids) - 1)
        kv_cache.truncate(self.cache, length)

    def _logits(self, feed: list[int]) -> torch.Tensor:
        input_ids = torch.tensor([feed], device=self.draft.device)
        out = self.draft(
            input_ids=input_ids, **kv_cache.cache_arg(self.cache), use_cache=True, logits_to_keep=1
        )
        logits = out.logits[0, -1].float()  # [V_draft]
        return _fit_vocab(logits, self.target_vocab)


def _fit_vocab(logits: torch.Tensor, vocab: int) -> torch.Tensor:
    """Align a draft's logits to the target's vocabulary width (padding rows differ)."""
    if logits.shape[-1] >= vocab:
        return logits[..., :vocab]
    pad = logits.new_full((*logits.shape[:-1], vocab - logits.shape[-1]), float("-inf"))
    return torch.cat([logits, pad], dim=-1)


def tokenizers_match(target_tokenizer, draft_tokenizer) -> bool:
    """Do the two tokenizers give every token string the same id (drafts need no translation)?"""
    return target_tokenizer.get_vocab() == draft_tokenizer.get_vocab()
