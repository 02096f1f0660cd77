"""Tiny random EAGLE heads bound to the tiny random targets of tests/tiny.py."""

from __future__ import annotations

import torch

from specdec_core.heads.eagle.head import EagleHead
from specdec_core.models.loading import LoadedModel


def tiny_head(
    target: LoadedModel, kind: str = "eagle1", draft_vocab: int = 0, seed: int = 3
) -> EagleHead:
    torch.manual_seed(seed)
    model = target.model
    head = EagleHead(model.config, kind=kind, bias=True, draft_vocab=draft_vocab).eval()
    with torch.no_grad():
        for param in head.parameters():  # larger than the init: drafts are sharp, not uniform
            if param.dim() > 1:
                param.normal_(0, 0.2)
        if kind == "eagle3":
            head.lm_head.weight.mul_(4.0)
    if draft_vocab:
        # the draft vocabulary: every other id, always including the frequent low ones
        ids = torch.arange(model.config.vocab_size)[: 2 * draft_vocab : 2]
        head.set_draft_vocab(ids)
    return head.bind(model.get_input_embeddings(), model.get_output_embeddings())
