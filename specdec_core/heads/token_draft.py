"""The token-level draft that `specdec train draft` makes, stored without the target's embedding.

The draft is a standard one-layer `LlamaForCausalLM` whose (tied) embedding and lm_head are the
target's own frozen ones. Storing them would add 49152 x 576 half-precision weights (~57 MB) to
a ~7 MB model, so the saved directory holds `config.json`, the layer and final-norm weights in
`model.safetensors`, the tokenizer, and `specdec_card.json` with `"embedding_from_target": true`.
`load_draft_dir` rebuilds the full `LlamaForCausalLM` around the target's embedding (shared,
not copied); the result runs as a classic draft and in transformers' assisted generation.
To use it elsewhere as a plain checkpoint, call `load_draft_dir(...).model.save_pretrained(dir)`.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import LlamaConfig, LlamaForCausalLM

from specdec_core.errors import SpecdecError
from specdec_core.files import save_tensors_atomic, write_atomic
from specdec_core.models.loading import LoadedModel, fast_cpu_paths

CARD = "specdec_card.json"


def is_partial_draft(directory: Path) -> bool:
    card = directory / CARD
    return card.is_file() and bool(json.loads(card.read_text()).get("embedding_from_target"))


def save_draft(
    model: LlamaForCausalLM,
    tokenizer,
    directory: Path,
    card: dict,
    dtype: torch.dtype = torch.float16,
) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    config = model.config.to_dict()
    config.update(architectures=["LlamaForCausalLM"], tie_word_embeddings=True)
    config.pop("_attn_implementation_autoset", None)
    write_atomic(directory / "config.json", json.dumps(config, indent=2, default=str))
    state = {
        key: value.detach().to("cpu", dtype).contiguous()
        for key, value in model.state_dict().items()
        if not key.startswith(("model.embed_tokens", "lm_head"))
    }
    save_tensors_atomic(directory / "model.safetensors", state)
    tokenizer.save_pretrained(directory)
    write_atomic(directory / CARD, json.dumps({**card, "embedding_from_target": True}, indent=2))
    return directory


def load_draft_dir(directory: Path, target: LoadedModel) -> LoadedModel:
    """Rebuild the draft around the target's embedding / lm_head; check they fit."""
    config = LlamaConfig(**json.loads((directory / "config.json").read_text()))
    embedding = target.model.get_input_embeddings()
    if tuple(embedding.weight.shape) != (config.vocab_size, config.hidden_size):
        raise SpecdecError(
            f"the draft in {directory} expects a target embedding of {config.vocab_size} x "
            f"{config.hidden_size} but the target has {tuple(embedding.weight.shape)}; "
            "use it with the target it was trained for"
        )
    config.tie_word_embeddings = True
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    state = load_file(str(directory / "model.safetensors"))
    model.load_state_dict(state, strict=False, assign=True)
    model.model.embed_tokens = embedding
    model.lm_head = target.model.get_output_embeddings()
    model.model.rotary_emb = type(model.model.rotary_emb)(config)  # real (non-meta) buffers
    model.to(device=target.device, dtype=target.dtype).eval()
    fast_cpu_paths(model)
    model.generation_config.eos_token_id = target.model.generation_config.eos_token_id
    return LoadedModel(
        model, target.tokenizer, str(directory), str(directory), target.device, target.dtype
    )
