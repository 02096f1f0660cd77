"""Tiny random checkpoints with native MTP layers, one per family layout, written to a folder.

Each is a target of TARGET_LAYERS layers shaped like its published config (very small sizes)
whose safetensors file also holds one MTP layer in the family's own names (specdec_core/heads/mtp/
layouts.py): the block is layer TARGET_LAYERS of a random model with one layer more, saved by
transformers itself (so MoE experts are stored per expert, as published checkpoints are), and
the wrapper (norms, projection, DeepSeek's shared head and embedding copy) is random.
`Written.full` is that larger model: its last layer is the MTP block as transformers reads it,
for a hand re-statement of the engine's forward.

    deepseek_v3  DeepseekV3Config: MLA, MoE from layer 1, `model.layers.2.{enorm, hnorm, ...}`
    glm4_moe     Glm4MoeConfig: MoE from layer 1, `model.layers.2.*` (DeepSeek's names)
    qwen3_next   Qwen3NextConfig, full attention only (the MTP block's kind; linear attention
                 layers cannot roll back here): gated attention, zero-centred norms, `mtp.*`
    mimo         Qwen2Config + num_nextn_predict_layers (MiMo is Qwen2-shaped):
                 `model.mtp_layers.0.*`
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import (
    DeepseekV3Config,
    DeepseekV3ForCausalLM,
    Glm4MoeConfig,
    Glm4MoeForCausalLM,
    PreTrainedModel,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3_5ForCausalLM,
    Qwen3_5TextConfig,
    Qwen3NextConfig,
    Qwen3NextForCausalLM,
)

from tests.tiny import VOCAB, tiny_tokenizer

FAMILIES = ("deepseek_v3", "glm4_moe", "qwen3_next", "qwen3_5", "mimo")
TARGET_LAYERS = 2
HIDDEN = 32

# the wrapper's checkpoint names, by family: (embedding norm, hidden norm, projection,
# output norm), the prefix of the first MTP layer's block, and where the wrapper lives
WRAPPER = {
    "deepseek_v3": (("enorm", "hnorm", "eh_proj", "shared_head.norm"), "model.layers.2.", ""),
    "glm4_moe": (("enorm", "hnorm", "eh_proj", "shared_head.norm"), "model.layers.2.", ""),
    "qwen3_next": (
        ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "fc", "norm"),
        "mtp.layers.0.",
        "mtp.",
    ),
    "qwen3_5": (
        ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "fc", "norm"),
        "mtp.layers.0.",
        "mtp.",
    ),
    "mimo": (
        ("token_layernorm", "hidden_layernorm", "input_proj", "final_layernorm"),
        "model.mtp_layers.0.",
        "model.mtp_layers.0.",
    ),
}


def config(family: str, layers: int):
    common = dict(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=layers,
        num_attention_heads=4,
        max_position_embeddings=256,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
        rms_norm_eps=1e-6,
    )
    moe = dict(moe_intermediate_size=16, num_experts_per_tok=2, norm_topk_prob=True)
    if family == "deepseek_v3":
        return DeepseekV3Config(
            **common, **moe, intermediate_size=64, num_key_value_heads=4, n_routed_experts=4,
            n_group=2, topk_group=1, n_shared_experts=1, first_k_dense_replace=1,
            q_lora_rank=16, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8,
            v_head_dim=8, num_nextn_predict_layers=1,
        )  # fmt: skip
    if family == "glm4_moe":
        return Glm4MoeConfig(
            **common, **moe, intermediate_size=64, num_key_value_heads=2, head_dim=8,
            n_routed_experts=4, n_group=1, topk_group=1, n_shared_experts=1,
            first_k_dense_replace=1, num_nextn_predict_layers=1,
        )  # fmt: skip
    if family == "qwen3_next":
        return Qwen3NextConfig(
            **common, **moe, intermediate_size=64, num_key_value_heads=2, head_dim=8,
            num_experts=4, shared_expert_intermediate_size=16,
            layer_types=["full_attention"] * layers, num_nextn_predict_layers=1,
        )  # fmt: skip
    if family == "qwen3_5":
        return Qwen3_5TextConfig(
            **common, intermediate_size=64, num_key_value_heads=2, head_dim=8,
            layer_types=["full_attention"] * layers, mtp_num_hidden_layers=1,
        )  # fmt: skip
    return Qwen2Config(
        **common, intermediate_size=64, num_key_value_heads=2, num_nextn_predict_layers=1
    )


MODELS: dict[str, type[PreTrainedModel]] = {
    "deepseek_v3": DeepseekV3ForCausalLM,
    "glm4_moe": Glm4MoeForCausalLM,
    "qwen3_next": Qwen3NextForCausalLM,
    "qwen3_5": Qwen3_5ForCausalLM,
    "mimo": Qwen2ForCausalLM,
}


@dataclass
class Written:
    directory: Path
    full: PreTrainedModel  # TARGET_LAYERS + 1 layers; the last is the MTP block
    wrapper: dict[str, torch.Tensor]  # by part: embedding_norm, hidden_norm, fc, output_norm, head
    embedding_copy: torch.Tensor | None  # DeepSeek layout: the MTP layer's stored embedding


def _randomize(model: PreTrainedModel, generator: torch.Generator) -> None:
    """Norm weights and router biases off their constant init, embeddings of unit scale (a
    trained model's residual stream is far above the norms' eps), the lm_head sharpened (as in
    tests/tiny.py: drafts meet a peaked target), EOS rarely the argmax."""
    with torch.no_grad():
        model.get_input_embeddings().weight.normal_(0.0, 0.3, generator=generator)
        for name, param in model.named_parameters():
            if "norm" in name:
                param.add_(0.3 * torch.randn(param.shape, generator=generator))
        for name, buffer in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                buffer.copy_(0.1 * torch.randn(buffer.shape, generator=generator))
        model.lm_head.weight.mul_(4.0)
        model.lm_head.weight[2] = 0.0


def write_checkpoint(
    family: str, directory: Path, seed: int = 0, head: bool = True, aligned: bool = False
) -> Written:
    """A target folder of `family` with one MTP layer in its checkpoint (module docstring);
    `head`: DeepSeek layout stores `shared_head.head` (else the target's lm_head drafts).
    `aligned`: a wrapper that drafts often what the target says, for drafting tests (the
    projection passes the embedding through, the output norm and head are the target's
    final norm and lm_head: a tiny random target's next token depends mostly on its last)."""
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model_class = MODELS[family]
    full = model_class(config(family, TARGET_LAYERS + 1)).eval()
    _randomize(full, generator)
    staging = directory.parent / f"{directory.name}-full"
    full.save_pretrained(staging)
    saved = load_file(str(staging / "model.safetensors"))

    target = model_class(config(family, TARGET_LAYERS)).eval()
    target.load_state_dict(full.state_dict(), strict=False)  # all but the last layer
    target.generation_config.eos_token_id = 2
    target.save_pretrained(directory)
    tiny_tokenizer().save_pretrained(directory)
    state = load_file(str(directory / "model.safetensors"))

    names, prefix, wrapper_prefix = WRAPPER[family]
    layer = f"model.layers.{TARGET_LAYERS}."
    for key, value in saved.items():
        if key.startswith(layer):
            state[prefix + key.removeprefix(layer)] = value
    wrapper_prefix = wrapper_prefix or prefix
    zero_centred = family in ("qwen3_next", "qwen3_5")
    wrapper = {
        "embedding_norm": _norm(generator, zero_centred),
        "hidden_norm": _norm(generator, zero_centred),
        "fc": 0.3 * torch.randn(HIDDEN, 2 * HIDDEN, generator=generator),
        "output_norm": _norm(generator, zero_centred),
    }
    if aligned:
        wrapper["embedding_norm"] = torch.zeros(HIDDEN) if zero_centred else torch.ones(HIDDEN)
        passes = [torch.eye(HIDDEN), torch.zeros(HIDDEN, HIDDEN)]
        wrapper["fc"] = torch.cat(passes[::-1] if family == "mimo" else passes, dim=1)
        wrapper["output_norm"] = state["model.norm.weight"].clone()
    for name, part in zip(
        names, ("embedding_norm", "hidden_norm", "fc", "output_norm"), strict=True
    ):
        state[f"{wrapper_prefix}{name}.weight"] = wrapper[part]
    copy = None
    if family in ("deepseek_v3", "glm4_moe"):
        copy = state["model.embed_tokens.weight"].clone()
        state[f"{prefix}embed_tokens.weight"] = copy
        if head:
            wrapper["head"] = 4.0 * torch.randn(VOCAB, HIDDEN, generator=generator)
            if aligned:
                wrapper["head"] = state["lm_head.weight"].clone()
            state[f"{prefix}shared_head.head.weight"] = wrapper["head"]
    save_file(
        {k: v.contiguous() for k, v in state.items()},
        str(directory / "model.safetensors"),
        metadata={"format": "pt"},
    )
    return Written(directory, full, wrapper, copy)


def _norm(generator: torch.Generator, zero_centred: bool) -> torch.Tensor:
    noise = 0.3 * torch.randn(HIDDEN, generator=generator)
    return noise if zero_centred else 1.0 + noise
