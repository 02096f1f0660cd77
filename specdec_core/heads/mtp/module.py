"""One native MTP layer as a draft head: the family's wrapper around the target's own block.

vLLM's forward of an MTP layer (layouts.py names the parts per family):

    e   = embedding(x_{t+1})                     # the target's embedding
    e   = 0 at position 0                        # DeepSeek-V3, GLM-4.5, MiMo (not Qwen3-Next)
    x   = fc(cat(embedding_norm(e), hidden_norm(h_t)))      # MiMo: cat(hidden, embedding)
    out = block(x)                               # one full decoder layer of the target's kind
    DeepSeek-V3, GLM-4.5:  state = out,               logits = head(output_norm(out))
    Qwen3-Next, MiMo:      state = output_norm(out),  logits = lm_head(state)

`head` is the layer's own `shared_head.head` where the checkpoint stores one, else the
target's lm_head; the norms are the target's own norm class (Qwen3-Next: zero-centred,
weight 1 + w); the block is the class of the target's decoder layers, built from the target's
config, so MLA, MoE routing and gated attention are transformers' arithmetic, not ours. h_t is
the target's last hidden state at t (after its final norm; for MiMo before it, see
`from_target`); `state` is what a later draft step feeds back as h.

The module speaks the EAGLE head's stepping API (eagle/head.py: `new_cache`, `step`,
`logits`, `to_target`, `target_ids`, `kind`, `fc`, `config`, `draft_vocab`), so the EAGLE-1
chain drafter and the EAGLE-2 tree drafter draft with it unchanged, except that features
from the target go through `from_target` first (drafters/mtp.py). The pair (h_t, x_{t+1}) sits
at position t, as in EAGLE and in vLLM's proposer.
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from transformers import PretrainedConfig

from specdec_core.decoding import attention_mask, kv_cache
from specdec_core.errors import SpecdecError
from specdec_core.heads.eagle.head import HeadOutput
from specdec_core.heads.mtp.layouts import MtpLayout


def block_config(config: PretrainedConfig, layout: MtpLayout, engine_index: int):
    """The target's config for a one-layer model whose layer 0 is the MTP block: full
    attention, and the MLP the engine gives the layer at `engine_index` (DeepSeek-V3 and
    GLM-4.5: MoE from `first_k_dense_replace` on; the MTP layer sits past the last layer)."""
    block = copy.deepcopy(config)
    block.num_hidden_layers = 1
    if getattr(block, "layer_types", None) is not None:
        block.layer_types = ["full_attention"]  # Qwen3-Next builds the MTP block as such
    if layout.offset_by_target and getattr(block, "first_k_dense_replace", None) is not None:
        block.first_k_dense_replace = 0 if engine_index >= config.first_k_dense_replace else 1
    block._attn_implementation = "sdpa"  # additive float masks, chains and trees alike
    return block


class MtpModule(nn.Module):
    kind = "mtp"  # not "eagle3": the EAGLE drafters feed it the target's last hidden state
    draft_vocab = 0  # drafts over the whole target vocabulary

    def __init__(
        self,
        layout: MtpLayout,
        config: PretrainedConfig,
        block: nn.Module,
        norm: type[nn.Module],
        head: bool = False,
    ) -> None:
        """`config`: the block's (block_config); `block`: the decoder layer built from it;
        `norm`: the target's RMSNorm class; `head`: the layer stores a head of its own."""
        super().__init__()
        self.layout, self.config = layout, config
        h, eps = config.hidden_size, config.rms_norm_eps
        self.embedding_norm = norm(h, eps=eps)
        self.hidden_norm = norm(h, eps=eps)
        self.fc = nn.Linear(2 * h, h, bias=False)
        self.block = block
        self.output_norm = norm(h, eps=eps)
        self.head = nn.Linear(h, config.vocab_size, bias=False) if head else None
        # the target's (embedding, lm_head, rotary embedding, final norm), not owned
        self._target: tuple[nn.Module, nn.Module, nn.Module, nn.Module] | None = None
        self._unnorm: torch.Tensor | None = None  # MiMo: the final norm's per-channel scale

    def bind(self, embedding, lm_head, rotary, final_norm) -> MtpModule:
        """Use the target's embedding, lm_head (where the layer has no head), RoPE and final
        norm (whose scale `from_target` divides out for a pre-norm family)."""
        self._target = (embedding, lm_head, rotary, final_norm)
        self._unnorm = None
        if self.layout.prenorm_feature:
            param = self.fc.weight
            with torch.no_grad():
                ones = torch.ones(1, self.config.hidden_size, device=param.device)
                scale = final_norm(ones.to(final_norm.weight.dtype))[0].to(param.dtype)
            if bool((scale == 0).any()):
                raise SpecdecError(
                    "this MTP layer reads the target's hidden state before its final norm, "
                    "which cannot be recovered where the final norm's weight is 0; "
                    "this checkpoint cannot draft here"
                )
            self._unnorm = scale
        return self

    def _bound(self) -> tuple[nn.Module, nn.Module, nn.Module, nn.Module]:
        if self._target is None:
            raise RuntimeError("MtpModule.bind(embedding, lm_head, rotary, final_norm) first")
        return self._target

    @property
    def embedding(self) -> nn.Module:
        return self._bound()[0]

    # -- features ------------------------------------------------------------------------
    def from_target(self, hidden: torch.Tensor) -> torch.Tensor:
        """The target's last hidden state after its final norm -> what `step` takes as h.

        MiMo's engine passes the state before the final norm (vLLM's MiMoModel returns
        hidden + residual and norms it only for the logits). RMSNorm is scale-invariant, so
        hidden_norm(x) depends on x only through x / rms(x) = y / w (y = final_norm(x), w its
        weight): dividing w out gives a state hidden_norm maps as it maps x (up to the eps
        under the square root). Other families take y itself.
        """
        if self._unnorm is None:
            return hidden
        return hidden / self._unnorm.to(hidden.dtype)

    # -- stepping (the EAGLE head's API) -------------------------------------------------
    def new_cache(self):
        return kv_cache.new_cache(self.config)

    def step(self, features, tokens, positions, mask=None, cache=None) -> HeadOutput:
        """One pass over n new rows: features [B, n, h] (h_t, or a state fed back), tokens
        [B, n] (x_{t+1}), positions [B, n]; mask as EagleHead.step's (None = causal)."""
        _, _, rotary, _ = self._bound()
        dtype = self.fc.weight.dtype
        emb = self.embedding(tokens).to(dtype)  # [B, n, h]
        if self.layout.zero_first_position:  # vLLM: "masking inputs at position 0"
            emb = emb.masked_fill((positions == 0)[..., None], 0.0)
        parts = [self.embedding_norm(emb), self.hidden_norm(features.to(dtype))]
        hidden = self.fc(torch.cat(parts[::-1] if self.layout.hidden_first else parts, dim=-1))
        past = kv_cache.cache_length(cache) if cache is not None else 0
        if mask is None and (tokens.shape[-1] > 1 or emb.device.type != "cpu"):
            mask = attention_mask.causal(tokens.shape[-1], past, dtype, emb.device)
        rope = rotary(hidden, positions)
        hidden = self.block(
            hidden, attention_mask=mask, position_ids=positions, position_embeddings=rope,
            **kv_cache.cache_arg(cache),
        )  # fmt: skip
        if self.layout.normed_output:
            hidden = self.output_norm(hidden)
        return HeadOutput(hidden, self)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[.., h] states -> [.., V] logits over the target's vocabulary."""
        if not self.layout.normed_output:
            hidden = self.output_norm(hidden)
        head = self.head if self.head is not None else self._bound()[1]
        return head(hidden.to(head.weight.dtype))

    def to_target(self, logits: torch.Tensor) -> torch.Tensor:
        return logits  # the draft vocabulary is the target's

    def target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids

    def draft_ids(self) -> torch.Tensor | None:
        return None
