"""Tiny random DFlash drafters bound to the tiny random targets of tests/tiny.py, and their
published layouts written out (z-lab's and the speculators')."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import Qwen3Config

from specdec_core.heads.dflash.draft import DFlashDraft, DFlashSpec
from specdec_core.heads.dflash.formats import save_dflash, zlab_config
from specdec_core.models.loading import LoadedModel
from tests.tiny import VOCAB

MASK = 0  # the tiny vocabulary's <unk> stands for the mask token


def tiny_spec(layers: int = 1, block: int = 4, target_layer_ids=(0, 1)) -> DFlashSpec:
    body = Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=256,
        rms_norm_eps=1e-6,
    )
    return DFlashSpec(body, block, MASK, tuple(k + 1 for k in target_layer_ids))


def tiny_dflash(target: LoadedModel, seed: int = 5, layers: int = 1, block: int = 4) -> DFlashDraft:
    torch.manual_seed(seed)
    draft = DFlashDraft(tiny_spec(layers, block)).eval()
    with torch.no_grad():
        for param in draft.parameters():  # larger than the init: sharp drafts, not uniform ones
            if param.dim() > 1:
                param.normal_(0, 0.3)
    model = target.model
    draft.bind(model.get_input_embeddings(), model.get_output_embeddings())
    return draft


def write_zlab(draft: DFlashDraft, directory: Path, target_layers: int = 2) -> Path:
    return save_dflash(draft, directory, target_layers)


def write_speculators(draft: DFlashDraft, target: LoadedModel, directory: Path) -> Path:
    """The same drafter in the speculators layout: the layer ids as HF hidden_states indices,
    its own copies of the target's embedding and lm_head, and the identity d2t / t2d."""
    directory.mkdir(parents=True, exist_ok=True)
    zlab = zlab_config(draft, 2)
    body = {
        k: v
        for k, v in zlab.items()
        if k not in ("architectures", "block_size", "num_target_layers", "dflash_config")
    }
    config = {
        "speculators_model_type": "dflash",
        "architectures": ["DFlashSpeculator"],
        "transformer_layer_config": body,
        "draft_vocab_size": VOCAB,
        "block_size": draft.spec.block_size,
        "aux_hidden_state_layer_ids": [k + 1 for k in zlab["dflash_config"]["target_layer_ids"]],
        "mask_token_id": draft.spec.mask_token_id,
        "sample_from_anchor": False,
        "speculators_config": {"algorithm": "dflash"},
    }
    (directory / "config.json").write_text(json.dumps(config))
    state = {k: v.clone() for k, v in draft.state_dict().items()}
    model = target.model
    state["embed_tokens.weight"] = model.get_input_embeddings().weight.detach().clone()
    state["lm_head.weight"] = model.get_output_embeddings().weight.detach().clone()
    state["d2t"] = torch.zeros(VOCAB, dtype=torch.long)
    state["t2d"] = torch.ones(VOCAB, dtype=torch.bool)
    save_file(state, str(directory / "model.safetensors"))
    return directory
