"""PARD: a parallel draft model proposes k tokens in one forward.

An, Bai, Liu, Li and Barsoum 2025, "PARD: Accelerating LLM Inference with Low-Cost PARallel
Draft Model Adaptation" (AMD-AGI/PARD; checkpoints amd/PARD-Llama-3.2-1B,
amd/PARD-Qwen2.5-0.5B, ...). A small causal LM with the target's tokenizer is adapted so that
a *mask token* stands for a token not yet known: after the committed tokens it reads k - 1
copies of the mask, and the logits at the last k positions (the pending token's, then each
mask's) are the distributions of the next k tokens. One forward drafts the whole chain, so the
draft cost hardly grows with k.

The draft keeps its own KV cache over a prefix of the committed tokens. `propose` feeds the
committed tokens it has not seen (the pending one last) and k - 1 masks at the following
positions, reads the last k rows, then drops the masks' KV entries, so the cache holds exactly
the committed tokens; `commit` has nothing to undo (the accepted drafts are fed as committed
tokens by the next `propose`, as PARD's own loop and vLLM's proposer do).

Tokens: at T = 0 each position's argmax; at T > 0 each position is sampled from its own
distribution q_i (temperature and top-p as the target's) and the rows are returned, so the
lossless chain rule (verifiers/lossless.py) keeps the target's distribution exactly: q_i is a
function of the committed context only, a valid draft distribution for every position.

The mask token is read from the draft's config.json as vLLM reads it (heads/pard.py:
`mask_token_id`, else `pard_token`, what PARD's checkpoints carry, else `ptd_token_id`);
`--method-param mask_token=ID` overrides it (a draft adapted elsewhere, whose config.json
says nothing); neither is a one-line error saying what to set.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from specdec_core.decoding import kv_cache
from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.proposal import EMPTY, Proposal
from specdec_core.decoding.sampling import probs, sample
from specdec_core.decoding.target import TargetOutput
from specdec_core.drafters.classic import tokenizers_match
from specdec_core.errors import SpecdecError
from specdec_core.heads.pard import stated_mask_token
from specdec_core.loop.drafter import Drafter
from specdec_core.models.loading import LoadedModel

# method parameters (`--method-param NAME=VALUE`) and their defaults; -1: from config.json
PARAMS: tuple[tuple[str, float], ...] = (("mask_token", -1.0),)


def mask_token(stated: int | None, vocab: int, override: int = -1) -> int:
    """The mask token of a PARD draft whose config.json names `stated` (None: none) and whose
    embedding has `vocab` rows: `override` where it is >= 0 (`--method-param mask_token`),
    else the stated one."""
    if override >= 0:
        token, where = override, "--method-param mask_token"
    elif stated is None:
        raise SpecdecError(
            "the draft's config.json names no mask token (pard_token, or mask_token_id / "
            "ptd_token_id), so it is no PARD draft: pass a PARD draft (amd/PARD-*, or one from "
            "`specdec train pard`), or give the id it was adapted with as --method-param "
            'mask_token=ID (to serve it, add "pard_token": ID to its config.json, where vLLM '
            "reads it)"
        )
    else:
        token, where = stated, "the draft's config.json"
    if not 0 <= token < vocab:
        raise SpecdecError(
            f"{where} gives mask token {token}, outside the draft's {vocab}-token embedding; "
            "give the id the draft was adapted with"
        )
    return token


def draft_block(q: torch.Tensor, greedy: bool, generator: torch.Generator) -> list[int]:
    """One token per row of `q` [k, V]: its argmax at T = 0, else drawn from the row itself."""
    if greedy:
        return q.argmax(-1).tolist()
    return [sample(row, generator) for row in q]


def build_pard(target: LoadedModel, draft: LoadedModel, history=None, costs=None, acceptance=None):
    """The pard method's drafter (the registry's builder signature): a draft with the target's
    tokenizer, whose drafts the target reads as they are."""
    if not isinstance(draft, LoadedModel):
        raise SpecdecError("the pard method needs a PARD draft model; pass --draft SPEC")
    if not tokenizers_match(target.tokenizer, draft.tokenizer):
        raise SpecdecError(
            "a PARD draft proposes token ids the target reads as they are, so it needs the "
            "target's tokenizer (as vLLM's parallel drafting does); pick a PARD draft of the "
            "target's family, or --method classic for a draft of another tokenizer"
        )
    return PardDrafter(draft.model, target.vocab_size)


class PardDrafter(Drafter):
    name = "pard"

    def __init__(self, draft: PreTrainedModel, target_vocab: int) -> None:
        self.draft = draft
        self.target_vocab = target_vocab
        self.vocab = int(draft.get_input_embeddings().weight.shape[0])
        self.stated = stated_mask_token(draft.config.to_dict())  # None: the config names none
        self.cache = kv_cache.new_cache(draft.config)

    def mask(self, config: DecodeConfig) -> int:
        """The mask token this run drafts with (`mask_token`)."""
        override = config.method_int("mask_token", -1, self.name)
        return mask_token(self.stated, self.vocab, override)

    def describe(self, config: DecodeConfig) -> dict:
        return {"mask_token": self.mask(config)}

    def begin(self, ids: list[int], features: TargetOutput) -> None:
        self.cache = kv_cache.new_cache(self.draft.config)

    @torch.inference_mode()
    def propose(self, ids: list[int], config: DecodeConfig, generator: torch.Generator) -> Proposal:
        k = config.k
        if k < 1:
            return EMPTY
        seen = kv_cache.cache_length(self.cache)
        feed = ids[seen:] + [self.mask(config)] * (k - 1)
        q = probs(self.block_logits(feed, k), config.temperature, config.top_p)  # [k, V]
        kv_cache.truncate(self.cache, len(ids))  # the masks' entries go; committed ids stay
        return Proposal(tokens=draft_block(q, config.greedy, generator), q=q)

    def commit(self, ids: list[int], accepted: int, features: TargetOutput) -> None:
        # the cache holds committed tokens only; keep at most those before the pending one
        kv_cache.truncate(self.cache, min(kv_cache.cache_length(self.cache), len(ids) - 1))

    def block_logits(self, feed: list[int], k: int) -> torch.Tensor:
        """[k, V_target] float32 logits of the last k positions of one forward over `feed`
        after the cache (the target's width: a draft's padding rows cut, missing ones -inf)."""
        input_ids = torch.tensor([feed], device=self.draft.device)
        out = self.draft(
            input_ids=input_ids, **kv_cache.cache_arg(self.cache), use_cache=True, logits_to_keep=k
        )
        logits = out.logits[0, -k:].float()
        width = logits.shape[-1]
        if width >= self.target_vocab:
            return logits[:, : self.target_vocab]
        return torch.cat([logits, logits.new_full((k, self.target_vocab - width), -torch.inf)], -1)
