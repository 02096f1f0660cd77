"""P-EAGLE heads: an EAGLE-3 head that drafts all k positions in one pass (speculators' `peagle`).

P-EAGLE (Hui et al. 2026, arXiv 2602.01469; vllm-project/speculators `models/peagle`) is an
EAGLE-3 head trained so that one causal pass drafts a whole chain. The last real row (the
pending token x_n with the target's fused states of x_{n-1}, at position n-1) predicts the first
draft, as in EAGLE-3; k-1 *mask rows* follow it at positions n, n+1, ..., each with the token
`mask_token_id` and, in place of the target's hidden states, the learned vector `mask_hidden`
(the concatenated width of the target states, so it goes through the head's input norms and
`fc` like them: vLLM's `combine_hidden_states(mask_hidden)`); row i's logits draft token i+1.
Every row attends causally to the real rows before it and the mask rows before it (speculators'
`create_peagle_mask_mod`: depth d sees depth 0 up to its anchor and its own rollout's depths
below d; vLLM runs it as one causal pass, `v1/spec_decode/llm_base_proposer.py`
`parallel_drafting`). The drafts never feed back: no draft token enters the pass.

Read exactly, in two layouts (tests/test_peagle_formats.py proves the arithmetic of both):

- speculators' `peagle` (what its trainer writes and vLLM loads): config.json with
  `speculators_model_type: "peagle"`, the decoder's config nested in `transformer_layer_config`
  (its `num_hidden_layers` the head's decoder layers; its `vocab_size` the target's), and at the
  top `draft_vocab_size`, `mask_token_id` (vLLM maps it to `pard_token`; required),
  `norm_before_residual`, `norm_before_fc`, `fc_norm`, `norm_output`,
  `eagle_aux_hidden_state_layer_ids`, `embed_requires_grad`, `target_hidden_size`,
  `speculators_config`; a config key outside `SPECULATORS_KEYS` is refused by name. Weights:
  `fc.weight`, `layers.0.*` (the EAGLE-3 first layer: q/k/v over cat(emb, h), `hidden_norm`),
  `layers.{i}.*` for i >= 1 (plain Llama decoder layers, vLLM's `LlamaDecoderLayer` past layer
  0), `norm`, `lm_head` [Vd, h], `d2t` / `t2d` (only with a reduced vocabulary), `mask_hidden`
  [1, 1, n_aux * h] and `embed_tokens.weight`, which P-EAGLE trains (`embed_requires_grad`
  true): a stored embedding is the head's own, as vLLM keeps a checkpoint's embedding that
  differs from the target's (`_maybe_share_embeddings`).
- the official EAGLE-3 layout plus P-EAGLE's additions: `midlayer.*` (one layer), a flat
  config.json with `mask_token_id`, and `mask_hidden`.

Every stored weight must be one the head reads and every one it reads must be stored, with its
shape; the message names the weight as the file spells it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import torch
from torch import nn
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaDecoderLayer

from specdec_core.decoding import attention_mask, kv_cache
from specdec_core.errors import SpecdecError
from specdec_core.files import save_tensors_atomic, write_atomic
from specdec_core.heads.eagle import fused_layer
from specdec_core.heads.eagle.head import (
    OFFICIAL,
    Eagle3Variant,
    EagleHead,
    HeadOutput,
    head_config,
)
from specdec_core.heads.eagle.layouts import flat_config, is_peagle
from specdec_core.models.loading import LoadedModel, drafting_dtype, fast_cpu_paths
from specdec_core.models.weights_file import check_shapes, listed, read_weights

PEAGLE = "peagle"  # speculators_model_type
ARCHITECTURE = "PEagleSpeculator"  # speculators' PEagleSpeculatorConfig default
# the top-level keys of a speculators P-EAGLE config.json: PEagleSpeculatorConfig's fields
# (those of Eagle3SpeculatorConfig and SpeculatorModelConfig) and what PretrainedConfig writes
SPECULATORS_KEYS = frozenset({
    "architectures", "auto_map", "speculators_model_type", "speculators_version",
    "speculators_config", "transformer_layer_config", "draft_vocab_size", "target_hidden_size",
    "norm_before_residual", "norm_before_fc", "fc_norm", "norm_output",
    "eagle_aux_hidden_state_layer_ids", "embed_requires_grad", "mask_token_id",
    "dtype", "torch_dtype", "transformers_version", "tie_word_embeddings",
})  # fmt: skip


class PEagleHead(EagleHead):
    """An EAGLE-3 head with P-EAGLE's additions: `mask_hidden` [n_aux * h], the token
    `mask_token_id`, decoder layers after the first (`more`: speculators' `layers.1..`) and,
    where the checkpoint stores one, its own token embedding."""

    def __init__(
        self,
        config: LlamaConfig,
        mask_token_id: int,
        draft_vocab: int = 0,
        layers: int = 1,
        variant: Eagle3Variant = OFFICIAL,
        own_embedding: bool = False,
    ) -> None:
        super().__init__(config, "eagle3", bias=False, draft_vocab=draft_vocab, variant=variant)
        if not 0 <= mask_token_id < self.config.vocab_size:
            raise SpecdecError(
                f"the P-EAGLE head's mask_token_id {mask_token_id} is outside the target's "
                f"vocabulary of {self.config.vocab_size}; the config belongs to another model"
            )
        self.mask_token_id = mask_token_id
        self.stack_config = head_config(self.config, num_hidden_layers=layers)
        self.stack_config._attn_implementation = "sdpa"
        self.more = nn.ModuleList(LlamaDecoderLayer(self.stack_config, i) for i in range(1, layers))
        self.mask_hidden = nn.Parameter(torch.zeros(variant.fused * self.config.hidden_size))
        self.embed_tokens = (
            nn.Embedding(self.config.vocab_size, self.config.hidden_size) if own_embedding else None
        )

    @property
    def decoder_layers(self) -> int:
        return 1 + len(self.more)

    @property
    def embedding(self) -> nn.Module:
        return self.embed_tokens if self.embed_tokens is not None else super().embedding

    def new_cache(self):
        return kv_cache.new_cache(self.stack_config)

    def mask_rows(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """`n` mask rows: features [n, n_aux * h] (mask_hidden) and tokens [n] (mask_token_id)."""
        features = self.mask_hidden.detach()[None].expand(n, -1)
        tokens = torch.full((n,), self.mask_token_id, dtype=torch.long, device=features.device)
        return features, tokens

    def step(self, features, tokens, positions, mask=None, cache=None) -> HeadOutput:
        """One pass over n new rows (shapes as `EagleHead.step`): the first layer, then the
        layers after it; with `norm_output` the state after the last layer is normed."""
        if not self.more:
            return super().step(features, tokens, positions, mask, cache)
        emb = self.embedding(tokens).to(self.fc.weight.dtype)
        features = features.to(self.fc.weight.dtype)
        past = kv_cache.cache_length(cache) if cache is not None else 0
        if mask is None and (tokens.shape[-1] > 1 or emb.device.type != "cpu"):
            mask = attention_mask.causal(tokens.shape[-1], past, emb.dtype, emb.device)
        if self.variant.window and int(positions.max()) >= self.variant.window:
            raise SpecdecError(
                f"this P-EAGLE head attends over a sliding window of {self.variant.window} "
                "positions, which drafting here does not apply; keep prompt and output under "
                f"{self.variant.window} tokens"
            )
        rope = self.rotary(emb, positions)
        if features.shape[-1] != self.config.hidden_size:
            features = self.fuse(features)
        layer = self.midlayer
        hidden = layer(
            emb, features, mask, rope, cache, self._fusion(0, layer.self_attn, layer.mlp, emb)
        )
        for i, layer in enumerate(self.more, start=1):
            fusion = self._fusion(i, layer.self_attn, layer.mlp, hidden)
            if fusion is not None:
                hidden = fused_layer.decoder_layer(layer, fusion, hidden, mask, rope, cache)
                continue
            hidden = layer(
                hidden, attention_mask=mask, position_embeddings=rope, **kv_cache.cache_arg(cache)
            )
        if self.variant.norm_output:
            hidden = self.norm(hidden)
        return HeadOutput(hidden, self)


# -- names: the file's (speculators `layers.i`, or `midlayer`) <-> the head's -------------------


def _internal(key: str) -> str:
    """A speculators weight name as the head names it."""
    if key.startswith("layers."):
        index, rest = key.removeprefix("layers.").split(".", 1)
        return f"midlayer.{rest}" if index == "0" else f"more.{int(index) - 1}.{rest}"
    return key


def _spelled(key: str) -> str:
    """A head weight name as the speculators layout spells it."""
    if key.startswith("midlayer."):
        return "layers.0." + key.removeprefix("midlayer.")
    if key.startswith("more."):
        index, rest = key.removeprefix("more.").split(".", 1)
        return f"layers.{int(index) + 1}.{rest}"
    return key


def _names(keys: Iterable[str], speculators: bool) -> str:
    keys = list(keys)
    return listed(_spelled(k) for k in keys) if speculators else listed(keys)


def peagle_from_state(
    raw: dict,
    variant: Eagle3Variant,
    state: dict[str, torch.Tensor],
    target_hidden: int,
    target_vocab: int,
) -> PEagleHead:
    """A P-EAGLE head from its config.json as stored (`raw`), the EAGLE-3 arithmetic it asks
    for (`formats.eagle3_variant`) and its weights; checked against a target of hidden size
    `target_hidden` and vocabulary `target_vocab`."""
    state = {key.removeprefix("model."): value for key, value in state.items()}
    nested = isinstance(raw.get("transformer_layer_config"), dict)
    if nested:
        unknown = sorted(set(raw) - SPECULATORS_KEYS)
        if unknown:
            raise SpecdecError(
                f"the P-EAGLE head's config.json has keys speculators' peagle format does not "
                f"define: {listed(unknown)}; it was written by another tool (check them, then "
                "remove them)"
            )
        if raw.get("speculators_model_type") != PEAGLE:
            raise SpecdecError(
                f"the head's config.json is in speculators' layout with speculators_model_type "
                f"{raw.get('speculators_model_type')!r} and a mask_token_id; a P-EAGLE head "
                'names "peagle" there: fix the config or use the method its type names'
            )
    values = flat_config(raw)
    speculators = any(key.startswith("layers.0.") for key in state)
    if speculators and any(key.startswith("midlayer.") for key in state):
        raise SpecdecError(
            "the P-EAGLE head stores its first layer twice, as midlayer.* and as layers.0.*; "
            "keep one"
        )
    if not speculators and any(key.startswith("layers.") for key in state):
        raise SpecdecError(
            "the P-EAGLE head has layers.* beside midlayer.*; in the EAGLE-3 layout only a "
            "one-layer head is read: write it in speculators' layout (layers.0.*, layers.1.*, ...)"
        )
    state = {_internal(key): value for key, value in state.items()}
    if "mask_hidden" not in state:
        raise SpecdecError(
            'the head\'s config.json declares a P-EAGLE head (speculators_model_type "peagle") '
            "but its weights have no mask_hidden, which vLLM refuses too ('mask_hidden not found "
            "in weights'); the config and the weights belong to different heads"
        )
    mask_token_id = values.get("mask_token_id")
    if mask_token_id is None:
        raise SpecdecError(
            "the P-EAGLE head's config.json has no mask_token_id, the token its mask rows read "
            "(vLLM's loader requires it too); add the id it was trained with"
        )
    for needed in ("fc.weight", "lm_head.weight"):
        if needed not in state:
            raise SpecdecError(
                f"the P-EAGLE head lacks {needed}, which every EAGLE-3 head has; the config and "
                "the weights belong to different heads"
            )
    hidden = int(state["fc.weight"].shape[0])
    if hidden != target_hidden or int(values.get("hidden_size", hidden)) != target_hidden:
        raise SpecdecError(
            f"the P-EAGLE head has hidden size {hidden} but the target has {target_hidden}; "
            "use a head trained for this target"
        )
    vocab = int(state["t2d"].shape[0]) if "t2d" in state else int(values.get("vocab_size") or 0)
    if vocab != target_vocab:
        raise SpecdecError(
            f"the P-EAGLE head has a vocabulary of {vocab} tokens but the target has "
            f"{target_vocab}; use a head trained for this target"
        )
    draft_vocab = int(state["lm_head.weight"].shape[0])
    if "d2t" in state and "t2d" not in state:  # t2d follows from d2t
        ids = torch.arange(len(state["d2t"])) + state["d2t"].to(torch.long)
        state["t2d"] = torch.zeros(vocab, dtype=torch.bool)
        state["t2d"][ids] = True
    if "d2t" not in state:  # the full vocabulary: identity maps
        state["d2t"] = torch.zeros(draft_vocab, dtype=torch.long)
        state["t2d"] = torch.ones(vocab, dtype=torch.bool)
    width = int(state["fc.weight"].shape[1])
    if width != variant.fused * hidden:
        raise SpecdecError(
            f"the P-EAGLE head's fc reads {width} features, {width / hidden:g} target hidden "
            f"states of {hidden}, but its config.json names {variant.fused}; set "
            "eagle_aux_hidden_state_layer_ids to the target layers it was trained on"
        )
    layers = 1 + max((int(k.split(".")[1]) + 1 for k in state if k.startswith("more.")), default=0)
    stated = int(values.get("num_hidden_layers") or layers)
    if nested and stated != layers:
        raise SpecdecError(
            f"the P-EAGLE head's transformer_layer_config has num_hidden_layers {stated} but its "
            f"weights hold {layers} decoder layers; the config and the weights belong to "
            "different heads"
        )
    state["mask_hidden"] = state["mask_hidden"].reshape(-1)  # speculators: [1, 1, n_aux * h]
    config = LlamaConfig(**{**values, "vocab_size": vocab, "num_hidden_layers": 1})
    head = PEagleHead(
        config, int(mask_token_id), draft_vocab, layers, variant, "embed_tokens.weight" in state
    )
    state = {k: v.to(torch.long) if k == "d2t" else v for k, v in state.items()}
    _check_keys(head, state, speculators)
    head.load_state_dict(state)
    return head


def _check_keys(head: PEagleHead, state: dict[str, torch.Tensor], speculators: bool) -> None:
    expected = head.state_dict()
    unread = sorted(set(state) - set(expected))
    if unread:
        raise SpecdecError(
            f"the P-EAGLE head holds weights it does not read: {_names(unread, speculators)}; "
            "dropping them would make it draft wrongly (a config flag missing, e.g. fc_norm or "
            "norm_before_fc?): fix its config.json or convert the head"
        )
    missing = sorted(set(expected) - set(state))
    if missing:
        raise SpecdecError(
            f"the P-EAGLE head lacks {_names(missing, speculators)}, which its config.json "
            "needs; the config and the weights belong to different heads"
        )
    check_shapes(
        ((_names([k], speculators), v, expected[k].shape) for k, v in state.items()),
        "the P-EAGLE head's",
        "its config.json",
        "the config and the weights belong to different heads",
    )


# -- loading -------------------------------------------------------------------------------


def is_peagle_dir(directory: Path) -> bool:
    """Does `directory` hold a P-EAGLE head, as its config.json declares (`layouts.is_peagle`)?"""
    config = _raw_config(directory)
    return config is not None and is_peagle(config)


def _raw_config(directory: Path) -> dict | None:
    path = directory / "config.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def read_peagle(directory: Path, spec: str, variant: Eagle3Variant) -> PEagleHead:
    """The P-EAGLE head in `directory` as stored (its float dtype, CPU), bound to no target:
    for writing it out again."""
    raw = _raw_config(directory) or {}
    state = read_weights(directory, spec)
    values = flat_config(raw)
    t2d = next((v for k, v in state.items() if k.removeprefix("model.") == "t2d"), None)
    vocab = len(t2d) if t2d is not None else int(values.get("vocab_size") or 0)
    stored = next((v.dtype for v in state.values() if v.is_floating_point()), torch.float32)
    head = peagle_from_state(raw, variant, state, int(values.get("hidden_size") or 0), vocab)
    return head.to(dtype=stored).eval()


def load_peagle(
    directory: Path,
    spec: str,
    variant: Eagle3Variant,
    target: LoadedModel,
    dtype: torch.dtype | None = None,
) -> PEagleHead:
    """The P-EAGLE head in `directory`, bound to `target` on its device, in `dtype` (default
    `drafting_dtype(target)`)."""
    raw = _raw_config(directory) or {}
    state = read_weights(directory, spec)
    model = target.model
    vocab = model.get_output_embeddings().weight.shape[0]
    head = peagle_from_state(raw, variant, state, model.config.hidden_size, vocab)
    head.to(device=target.device, dtype=dtype or drafting_dtype(target)).eval()
    fast_cpu_paths(head)
    return head.bind(model.get_input_embeddings(), model.get_output_embeddings())


# -- writing -------------------------------------------------------------------------------


def speculators_config(
    head: PEagleHead, speculative_tokens: int, verifier: str | None, architectures: list[str]
) -> dict:
    """config.json of `head` in speculators' peagle layout (what vLLM's speculators reader
    takes: `transformers_utils/configs/speculators/algos.py` `update_peagle`)."""
    layer = head.config.to_dict()
    rope = dict(layer.get("rope_parameters") or {})
    layer.update(
        model_type="llama",
        num_hidden_layers=head.decoder_layers,
        tie_word_embeddings=False,
        rope_theta=rope.get("rope_theta", 10000.0),
    )
    for key in ("architectures", "_attn_implementation_autoset", "mask_token_id"):
        layer.pop(key, None)
    for key in SPECULATORS_KEYS:
        layer.pop(key, None)
    variant = head.variant
    aux = list(variant.aux_layers) or None
    if aux:  # vLLM counts the target states it fuses from eagle_config (vllm issue #54526)
        layer["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": aux}
    if variant.window:
        layer.update(layer_types=["sliding_attention"], sliding_window=variant.window)
    for flag in ("fc_norm", "norm_output"):  # vLLM's update_peagle copies neither from the top
        if getattr(variant, flag):
            layer[flag] = True
    return {
        "architectures": [ARCHITECTURE],
        "speculators_model_type": PEAGLE,
        "transformer_layer_config": layer,
        "draft_vocab_size": head.draft_vocab,
        "target_hidden_size": None,
        "norm_before_residual": variant.norm_before_residual,
        "norm_before_fc": variant.norm_before_fc,
        "fc_norm": variant.fc_norm,
        "norm_output": variant.norm_output,
        "eagle_aux_hidden_state_layer_ids": aux,
        "embed_requires_grad": head.embed_tokens is not None,
        "mask_token_id": head.mask_token_id,
        "speculators_config": {
            "algorithm": PEAGLE,
            "proposal_methods": [
                {
                    "proposal_type": "greedy",
                    "speculative_tokens": speculative_tokens,
                    "verifier_accept_k": 1,
                    "accept_tolerance": 0.0,
                }
            ],  # fmt: skip
            "default_proposal_method": "greedy",
            "verifier": {"name_or_path": verifier, "architectures": architectures},
        },
    }


def save_peagle(
    head: PEagleHead,
    directory: str | Path,
    speculative_tokens: int,
    verifier: str | None,
    architectures: list[str],
    dtype: torch.dtype | None = None,
) -> Path:
    """Write `head` in speculators' peagle layout (config.json, model.safetensors): weights as
    speculators names them (`layers.i.*`, `mask_hidden` [1, 1, n_aux * h]), floats in `dtype`
    (default: as they are); d2t / t2d only with a reduced vocabulary, as speculators saves them."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config = speculators_config(head, speculative_tokens, verifier, architectures)
    write_atomic(directory / "config.json", json.dumps(config, indent=2, default=str) + "\n")
    state = {}
    reduced = head.draft_vocab != head.config.vocab_size
    for key, value in head.state_dict().items():
        if key in ("d2t", "t2d") and not reduced:
            continue
        value = value.detach().to("cpu")
        if value.is_floating_point() and dtype is not None:
            value = value.to(dtype)
        if key == "mask_hidden":
            value = value.reshape(1, 1, -1)
        state[_spelled(key)] = value.contiguous()
    save_tensors_atomic(directory / "model.safetensors", state)
    return directory
