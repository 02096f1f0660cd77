"""DFlash drafters as they are published, read exactly, and written back.

Two layouts (`--dflash SPEC`: `embedded`, a directory or a hub id):

- **z-lab** (z-lab/dflash, `z-lab/*-DFlash-*`; what vLLM's `qwen3_dflash.py` and SGLang's DFLASH
  read): config.json is a Qwen3 config of the drafter's layers plus `block_size` (top level, or
  in `dflash_config` in newer checkpoints), `num_target_layers` and
  `dflash_config.{mask_token_id, target_layer_ids}`. A target layer id k means the OUTPUT of
  target layer k, HF's `hidden_states[k + 1]`; without `target_layer_ids` the ids are z-lab's
  default spread (`default_target_layers`). Weights: `layers.*`, `fc`, `hidden_norm`, `norm`;
  the embedding and lm_head are the target's. A drafter over a reduced vocabulary adds
  `draft_vocab_size` to config.json and `lm_head` + `d2t` to its weights (what vLLM's
  `DFlashQwen3ForCausalLM` reads: its draft_id_to_target_id).
- **speculators** (vllm-project/speculators `speculators_model_type: "dflash"`): the layers'
  Qwen3 config in `transformer_layer_config`, `block_size`, `mask_token_id`,
  `aux_hidden_state_layer_ids` (already HF's `hidden_states` index: z-lab's k + 1),
  `draft_vocab_size`; weights as z-lab's plus `lm_head` over the draft vocabulary with `d2t`
  (draft id i -> target id i + d2t[i]) and `t2d`, and optionally `embed_tokens`.
  `sample_from_anchor: true` (the anchor row drafts too) is refused: vLLM does not run it.

Both read into one `DFlashSpec` + state dict; a weight neither layout names is an error that
names it, and every shape is checked against the config.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import torch
from transformers import Qwen3Config

from specdec_core.control import Progress, StopFlag
from specdec_core.errors import SpecdecError
from specdec_core.files import save_tensors_atomic, write_atomic
from specdec_core.heads.dflash.draft import DFlashDraft, DFlashSpec
from specdec_core.models.loading import LoadedModel, drafting_dtype
from specdec_core.models.model_folder import FolderKind, check_spec, read_config, resolve
from specdec_core.models.prepacked_linear import prepack
from specdec_core.models.weights_file import check_shapes, listed, read_weights

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
CARD = "specdec_card.json"  # the training card (specdec_core/training/card.py)
BUNDLED = "dflash"  # resources/dflash: the drafter bundled for the embedded model
ZLAB_KEYS = frozenset(
    {"architectures", "auto_map", "block_size", "dflash_config", "draft_vocab_size"}
)
ZLAB_KEYS_EXTRA = frozenset({"num_target_layers"})
SPECULATORS_KEYS = frozenset(
    {
        "speculators_model_type",
        "architectures",
        "transformer_layer_config",
        "draft_vocab_size",
        "block_size",
        "target_hidden_size",
        "aux_hidden_state_layer_ids",
        "mask_token_id",
        "sliding_window_non_causal",
        "sample_from_anchor",
        "speculators_config",
        "speculators_version",
        "has_no_defaults_at_init",
        "dtype",
        "torch_dtype",
        "transformers_version",
    }
)


def default_target_layers(target_layers: int, draft_layers: int) -> tuple[int, ...]:
    """z-lab's default target layer ids (outputs of layers, 0-based): the middle layer for a
    one-layer drafter, else draft_layers ids spread evenly from layer 1 to layer L - 3."""
    if draft_layers == 1:
        return (target_layers // 2,)
    start, end = 1, target_layers - 3
    return tuple(
        int(round(start + i * (end - start) / (draft_layers - 1))) for i in range(draft_layers)
    )


def spec_from_config(values: dict, name: str) -> DFlashSpec:
    """The DFlashSpec a config.json describes, in either layout."""
    if "speculators_model_type" in values:
        return _speculators_spec(values, name)
    if "dflash_config" in values or "DFlashDraftModel" in (values.get("architectures") or []):
        return _zlab_spec(values, name)
    raise SpecdecError(
        f"{name} is not a DFlash drafter (its config.json has neither dflash_config nor "
        "speculators_model_type 'dflash'); give a z-lab or speculators DFlash checkpoint"
    )


def _body(values: dict, name: str) -> Qwen3Config:
    kind = values.get("model_type", "qwen3")
    if kind != "qwen3":
        raise SpecdecError(
            f"{name}: DFlash layers of model_type '{kind}' are not read here (only qwen3, the "
            "layers every published DFlash drafter has)"
        )
    body = Qwen3Config(**{k: v for k, v in values.items() if k != "model_type"})
    types = getattr(body, "layer_types", None) or []
    if any(kind != "full_attention" for kind in types):
        raise SpecdecError(
            f"{name}: its layers include sliding-window attention, which this DFlash drafter "
            "does not run; use a drafter whose layer_types are all full_attention"
        )
    return body


def _zlab_spec(values: dict, name: str) -> DFlashSpec:
    dflash = values.get("dflash_config") or {}
    unknown = sorted(set(dflash) - {"mask_token_id", "target_layer_ids", "block_size"})
    if unknown:
        raise SpecdecError(f"{name}: dflash_config has keys not read here: {listed(unknown)}")
    block = values.get("block_size") or dflash.get("block_size")
    if not isinstance(block, int) or block < 2:
        raise SpecdecError(f"{name}: config.json needs block_size (a whole number ≥ 2)")
    mask = dflash.get("mask_token_id")
    if not isinstance(mask, int):
        raise SpecdecError(
            f"{name}: config.json has no dflash_config.mask_token_id; set it to the id the "
            "drafter was trained with"
        )
    body = _body({k: v for k, v in values.items() if k not in ZLAB_KEYS | ZLAB_KEYS_EXTRA}, name)
    ids = dflash.get("target_layer_ids")
    if ids is None:
        layers = values.get("num_target_layers")
        if not isinstance(layers, int):
            raise SpecdecError(
                f"{name}: config.json has neither dflash_config.target_layer_ids nor "
                "num_target_layers; set the target layers the drafter reads"
            )
        ids = default_target_layers(layers, body.num_hidden_layers)
    draft_vocab = values.get("draft_vocab_size")
    if draft_vocab is not None and draft_vocab == body.vocab_size:
        draft_vocab = None  # vLLM sets it to the vocabulary when absent: the target's lm_head
    return DFlashSpec(body, block, mask, tuple(int(k) + 1 for k in ids), draft_vocab)


def _speculators_spec(values: dict, name: str) -> DFlashSpec:
    if values["speculators_model_type"] != "dflash":
        raise SpecdecError(
            f"{name} is a speculators '{values['speculators_model_type']}' checkpoint, not "
            "dflash; load it with the method of its family"
        )
    unknown = sorted(set(values) - SPECULATORS_KEYS)
    if unknown:
        raise SpecdecError(f"{name}: config.json has keys not read here: {listed(unknown)}")
    if values.get("sample_from_anchor"):
        raise SpecdecError(
            f"{name}: sample_from_anchor is true (the anchor row drafts too); vLLM does not run "
            "such drafters and neither does this one"
        )
    body = _body(dict(values.get("transformer_layer_config") or {}), name)
    block, mask = values.get("block_size"), values.get("mask_token_id")
    layers = values.get("aux_hidden_state_layer_ids")
    if not isinstance(block, int) or block < 2:
        raise SpecdecError(f"{name}: config.json needs block_size (a whole number ≥ 2)")
    if not isinstance(mask, int):
        raise SpecdecError(f"{name}: config.json needs mask_token_id (the drafter's mask id)")
    if not layers:
        raise SpecdecError(f"{name}: config.json needs aux_hidden_state_layer_ids")
    draft_vocab = int(values.get("draft_vocab_size") or body.vocab_size)
    return DFlashSpec(body, block, mask, tuple(int(k) for k in layers), draft_vocab)


def draft_from_state(spec: DFlashSpec, state: dict[str, torch.Tensor], name: str) -> DFlashDraft:
    """A DFlashDraft with `state`'s weights; unknown weights and wrong shapes are refused."""
    state = dict(state)
    t2d = state.pop("t2d", None)
    if "embed_tokens.weight" in state:
        spec = replace(spec, own_embedding=True)
    if spec.draft_vocab_size is None and "lm_head.weight" in state:
        spec = replace(spec, draft_vocab_size=state["lm_head.weight"].shape[0])
    if spec.draft_vocab_size is not None and "d2t" not in state:
        if spec.draft_vocab_size != spec.body.vocab_size:
            raise SpecdecError(f"{name}: a reduced draft vocabulary needs its d2t map")
        state["d2t"] = torch.zeros(spec.draft_vocab_size, dtype=torch.long)
    draft = DFlashDraft(spec)
    expected = draft.state_dict()
    unknown = [key for key in state if key not in expected]
    if unknown:
        raise SpecdecError(f"{name} has weights a DFlash drafter does not have: {listed(unknown)}")
    missing = [key for key in expected if key not in state]
    if missing:
        raise SpecdecError(f"{name} lacks DFlash weights: {listed(missing)}; copy it again")
    check_shapes(
        ((key, state[key], expected[key].shape) for key in expected),
        name,
        "its config.json",
        "the checkpoint and its config do not match",
    )
    draft.load_state_dict(state)
    if t2d is not None:
        _check_t2d(draft, t2d, name)
    return draft


def _check_t2d(draft: DFlashDraft, t2d: torch.Tensor, name: str) -> None:
    mapped = torch.zeros(draft.vocab_size, dtype=torch.bool)
    mapped[draft.draft_ids()] = True
    if t2d.shape != mapped.shape or not torch.equal(t2d.bool(), mapped):
        raise SpecdecError(f"{name}: its t2d and d2t disagree; export the drafter again")


def check_fits(spec: DFlashSpec, target: LoadedModel, name: str) -> None:
    """Refuse a drafter made for another target (hidden size, vocabulary, layers)."""
    config = target.model.config.get_text_config(decoder=True)
    if spec.hidden_size != config.hidden_size:
        raise SpecdecError(
            f"{name} has hidden size {spec.hidden_size} but the target has {config.hidden_size}; "
            "use a DFlash drafter trained for this target"
        )
    if spec.body.vocab_size != target.vocab_size:
        raise SpecdecError(
            f"{name} drafts a vocabulary of {spec.body.vocab_size} but the target's has "
            f"{target.vocab_size}; use a DFlash drafter trained for this target"
        )
    layers = int(config.num_hidden_layers)
    if not all(0 < layer <= layers for layer in spec.feature_layers):
        raise SpecdecError(
            f"{name} reads target layers {[k - 1 for k in spec.feature_layers]} but the target "
            f"has {layers}; use a DFlash drafter trained for this target"
        )
    if not 0 <= spec.mask_token_id < target.vocab_size:
        raise SpecdecError(f"{name}: mask_token_id {spec.mask_token_id} is outside the vocabulary")


KIND = FolderKind("DFlash drafter", "drafter", "--dflash", BUNDLED, "specdec train dflash")


def check_dflash_spec(spec: str) -> None:
    """Refuse a `--dflash` that is neither `embedded`, a directory nor a hub id (before a model
    loads)."""
    check_spec(spec, KIND)


def _located(spec: str, progress: Progress | None, stop: StopFlag | None):
    """(folder, name, DFlashSpec) of `spec`."""
    directory, name = resolve(
        spec, KIND, lambda values: spec_from_config(values, spec), progress, stop
    )
    return directory, name, spec_from_config(read_config(directory, name, KIND), name)


def read_dflash(spec: str, progress: Progress | None = None) -> DFlashDraft:
    """A drafter as it is stored (its dtype, on the CPU), bound to no target."""
    directory, name, config = _located(spec, progress, None)
    state = read_weights(directory, name)
    stored = next((v.dtype for v in state.values() if v.is_floating_point()), torch.float32)
    return draft_from_state(config, state, name).to(dtype=stored).eval()


def load_dflash(
    spec: str,
    target: LoadedModel,
    progress: Progress | None = None,
    stop: StopFlag | None = None,
    dtype: torch.dtype | None = None,
) -> DFlashDraft:
    """`--dflash SPEC` checked against `target`, on its device in `dtype` (default
    `drafting_dtype(target)`), bound to its embedding and lm_head."""
    directory, name, config = _located(spec, progress, stop)
    check_fits(config, target, name)
    draft = draft_from_state(config, read_weights(directory, name), name)
    draft.to(device=target.device, dtype=dtype or drafting_dtype(target)).eval()
    prepack(draft)  # on a CPU: oneDNN-packed linears for a block's few rows (prepacked_linear.py)
    model = target.model
    draft.bind(model.get_input_embeddings(), model.get_output_embeddings())
    return draft


def zlab_config(draft: DFlashDraft, target_layers: int) -> dict:
    """The z-lab config.json of `draft` for a target of `target_layers` layers."""
    spec = draft.spec
    body = spec.body.to_dict()
    for key in ("architectures", "auto_map", "transformers_version", "dtype", "torch_dtype"):
        body.pop(key, None)
    body["model_type"] = "qwen3"
    return {
        "architectures": ["DFlashDraftModel"],
        **body,
        "block_size": spec.block_size,
        **({"draft_vocab_size": spec.draft_vocab_size} if spec.draft_vocab_size else {}),
        "num_target_layers": target_layers,
        "dflash_config": {
            "mask_token_id": spec.mask_token_id,
            "target_layer_ids": [k - 1 for k in spec.feature_layers],
        },
    }


def save_dflash(
    draft: DFlashDraft, directory: str | Path, target_layers: int, card: dict | None = None
) -> Path:
    """Write `draft` in z-lab's layout (what vLLM and SGLang read), with `draft_vocab_size`,
    `lm_head` and `d2t` for a reduced draft vocabulary (vLLM's reading), and its card when
    given. A drafter with its own embedding cannot be written so and is refused."""
    spec = draft.spec
    if spec.own_embedding:
        raise SpecdecError(
            "this DFlash drafter carries its own embedding, which z-lab's layout cannot hold; "
            "serve it from its speculators checkpoint"
        )
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().cpu() for k, v in draft.state_dict().items()}
    save_tensors_atomic(out / WEIGHTS, state)
    config = zlab_config(draft, target_layers)
    write_atomic(out / CONFIG, json.dumps(config, indent=1) + "\n")
    if card is not None:
        write_atomic(out / CARD, json.dumps(card, indent=2) + "\n")
    return out
