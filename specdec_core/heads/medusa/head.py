"""Medusa heads: K small heads on the target's last hidden state (Cai et al. 2024, Medusa-1).

Head i reads h_t, the target's last hidden state after its final norm at position t (the state
its own lm_head turns into the distribution of token t + 1), and predicts token t + i + 2:

    head_i(h) = lm_head_i(block_i,L(… block_i,1(h)))      block(x) = x + SiLU(W x + b)

Each head has `num_layers` residual blocks (1 in Medusa-1) and its own lm head of
`draft_vocab` rows. With a reduced draft vocabulary (vLLM's `truncated_vocab_size`) the
buffer `token_map` holds the target id of each row (draft id j is target id token_map[j]);
without one the rows are the target's vocabulary. `shared_lm_head` is vLLM's
`original_lm_head`: one lm head serves every head. The layouts that store these weights are
read and written in formats.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class MedusaConfig:
    hidden_size: int
    vocab_size: int  # the target's vocabulary
    num_heads: int
    num_layers: int = 1  # residual blocks per head
    draft_vocab: int = 0  # rows of each lm head under a token map (0: the full vocabulary)
    bias: bool = True  # the blocks' linears have a bias (FasterDecoding's always do)
    shared_lm_head: bool = False  # one lm head for every head (vLLM's original_lm_head)

    @property
    def rows(self) -> int:
        """Rows of each lm head: the draft vocabulary, or the target's whole vocabulary."""
        return self.draft_vocab or self.vocab_size


class ResBlock(nn.Module):
    """x + SiLU(Linear(x)); starts as the identity when its linear is zero."""

    def __init__(self, hidden_size: int, bias: bool = True) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden_size, hidden_size, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.silu(self.linear(x))


class MedusaHeads(nn.Module):
    """The K heads. State dict: `blocks.{i}.{j}.linear.weight` / `.bias` (block j of head i),
    `lm_heads.{i}.weight` ([rows, h]; only `lm_heads.0` when shared), `token_map` ([rows]
    target ids, only with a reduced draft vocabulary)."""

    def __init__(self, config: MedusaConfig, token_map: torch.Tensor | None = None) -> None:
        super().__init__()
        self.config = config
        h = config.hidden_size
        self.blocks = nn.ModuleList(
            nn.Sequential(*(ResBlock(h, config.bias) for _ in range(config.num_layers)))
            for _ in range(config.num_heads)
        )
        count = 1 if config.shared_lm_head else config.num_heads
        self.lm_heads = nn.ModuleList(nn.Linear(h, config.rows, bias=False) for _ in range(count))
        if config.draft_vocab:
            if token_map is None or token_map.shape != (config.draft_vocab,):
                raise ValueError("a reduced draft vocabulary needs a token map of its size")
            self.register_buffer("token_map", token_map.to(torch.long))
        else:
            self.token_map = None

    @property
    def num_heads(self) -> int:
        return self.config.num_heads

    def lm_head(self, i: int) -> nn.Linear:
        return self.lm_heads[0 if self.config.shared_lm_head else i]

    def draft_ids(self) -> torch.Tensor:
        """Target id of each lm-head row: the token map, or every id of the vocabulary."""
        if self.token_map is not None:
            return self.token_map
        return torch.arange(self.config.vocab_size, device=self.lm_heads[0].weight.device)

    def head_logits(self, i: int, hidden: torch.Tensor) -> torch.Tensor:
        """[..., h] target hidden states -> [..., rows] logits of head i (draft-vocabulary ids)."""
        return self.lm_head(i)(self.blocks[i](hidden))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """[..., h] -> [K, ..., rows]: every head's logits over its lm head's rows."""
        return torch.stack([self.head_logits(i, hidden) for i in range(self.num_heads)])

    @torch.inference_mode()
    def top_tokens(self, hidden: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """[h] one hidden state -> (target ids [K, k], their log-probabilities [K, k]): each
        head's k most likely tokens, best first."""
        dtype = self.lm_heads[0].weight.dtype
        logits = self(hidden.to(dtype)[None])[:, 0].float()  # [K, rows]
        top = logits.log_softmax(-1).topk(min(k, logits.shape[-1]), dim=-1)
        ids = top.indices if self.token_map is None else self.token_map[top.indices]
        return ids, top.values
