"""Read and write EAGLE heads in the official checkpoint layouts.

A head directory holds `config.json` (a LlamaConfig whose `num_hidden_layers` counts the
head's decoder layers, 1 in every released head; EAGLE-1 heads add `bias`, EAGLE-3 heads
`draft_vocab_size`) and `model.safetensors` or `pytorch_model.bin` with the keys of
docs/architecture.md#eagle-heads. The layout is recognised from the keys:
`midlayer.*` is EAGLE-3, `layers.0.*` is EAGLE-1/2. Heads trained here use either layout
(`specdec train eagle --arch`); EAGLE-1 ones may add `d2t` / `t2d` (a reduced draft vocabulary,
EAGLE-3 convention), and both add `specdec_card.json` (the model card). An
`embed_tokens.weight` stored in a checkpoint is ignored: the embedding always comes from the
target, which must then be the model the head was trained on.

Published variants read as well (tests/test_eagle_head_fixtures.py builds each one,
tests/test_eagle_published_arithmetic.py checks each one's arithmetic):
- speculators (RedHatAI `*-speculator.eagle3`, the speculators trainer): the EAGLE-3 midlayer
  is stored as `layers.0.*` (recognised by its `hidden_norm`), and config.json nests the layer's
  config under `transformer_layer_config`;
- NVIDIA ModelOpt exports: `d2t` without `t2d` (t2d is derived from d2t);
- speculators research configs: `vocab_size` is the draft vocabulary and `target_vocab_size`
  the target's;
- config flags that change an EAGLE-3 head's arithmetic (`eagle3_variant`, an `Eagle3Variant`):
  SpecForge's EAGLE 3.1 `fc_norm` (weights `fc_norm.{i}`) and `norm_output`; speculators'
  `norm_before_residual`, `norm_before_fc` (weight `input_norm`), `eagle_aux_hidden_state_layer_ids`
  and a sliding-window layer (`layer_types`). An absent flag is off, as in SpecForge since
  its PR #879, SGLang and speculators.
A P-EAGLE head (speculators' `peagle`, or an EAGLE-3 config naming `mask_token_id`) is read by
heads/eagle/peagle.py: `load_head` and `read_head` hand its directory there.
A config that declares a layout (an architecture or model type naming EAGLE-3 or EAGLE) must
agree with the keys, and every stored weight must be one the head reads: a weight left unread
would make the head draft wrongly without a sign, so the head is refused with its name.

An EAGLE-1/2 head exported for SGLang (`specdec export --head-out`) keeps its reduced draft
vocabulary in SGLang's token-map file beside the weights (`layouts.TOKEN_MAP`), read here as
d2t / t2d.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import torch
from transformers import LlamaConfig

from specdec_core.control import Progress, StopFlag
from specdec_core.errors import SpecdecError
from specdec_core.files import save_tensors_atomic, write_atomic
from specdec_core.heads.eagle import peagle
from specdec_core.heads.eagle.head import OFFICIAL, Eagle3Variant, EagleHead
from specdec_core.heads.eagle.layouts import TOKEN_MAP, declared_kind, flat_config, layout_of
from specdec_core.models import hub
from specdec_core.models.loading import LoadedModel, drafting_dtype, fast_cpu_paths
from specdec_core.models.weights_file import check_shapes, listed, read_weights

CARD = "specdec_card.json"


def head_kind(state: dict[str, torch.Tensor]) -> str:
    kind = layout_of(state)
    if kind is None:
        raise SpecdecError(
            "this is not an EAGLE head: expected keys 'layers.0.*' (EAGLE-1/2) or 'midlayer.*' "
            f"(EAGLE-3), found e.g. {', '.join(sorted(state)[:4])}"
        )
    return kind


def _official_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """speculators stores the EAGLE-3 midlayer as `layers.0.*`: back to `midlayer.*`."""
    if "layers.0.hidden_norm.weight" not in state:
        return state
    if any(key.startswith("layers.1.") for key in state):
        raise SpecdecError(
            "this speculators EAGLE-3 head has more than one decoder layer; only one-layer "
            "EAGLE-3 heads (a midlayer) are supported"
        )
    return {
        "midlayer." + key.removeprefix("layers.0.") if key.startswith("layers.0.") else key: value
        for key, value in state.items()
    }


def eagle3_variant(config: dict) -> Eagle3Variant:
    """The arithmetic a head's (flattened) config.json asks for; see the module docstring."""
    key, nested = "eagle_aux_hidden_state_layer_ids", config.get("eagle_config") or {}
    named = [ids for ids in (config.get(key), nested.get(key)) if ids]  # speculators', vLLM's
    if len(named) == 2 and list(named[0]) != list(named[1]):
        raise SpecdecError(
            f"the head's config.json names two sets of target layers, {list(named[0])} and "
            f"{list(named[1])} (eagle_aux_hidden_state_layer_ids, at the top and in eagle_config); "
            "keep the one the head was trained on"
        )
    aux = tuple(int(layer) for layer in named[0]) if named else ()
    if len(aux) == 1:
        raise SpecdecError(
            f"this EAGLE-3 head reads one target layer ({aux[0]}); only heads that fuse two or "
            "more target layers through fc are read here"
        )
    sliding = (config.get("layer_types") or [None])[0] == "sliding_attention"
    variant = Eagle3Variant(
        aux_layers=aux,
        norm_before_fc=bool(config.get("norm_before_fc")),
        fc_norm=bool(config.get("fc_norm")),
        norm_before_residual=bool(config.get("norm_before_residual")),
        norm_output=bool(config.get("norm_output")),
        window=int(config.get("sliding_window") or 0) if sliding else 0,
    )
    if variant.norm_before_fc and variant.fc_norm:
        raise SpecdecError(
            "the head's config.json sets both norm_before_fc and fc_norm, which no publisher "
            "combines (speculators refuses it); keep the one the head was trained with"
        )
    return variant


# weights that exist only with a config flag: named when the flag is missing
_FLAGGED = {"fc_norm.": "fc_norm", "input_norm.": "norm_before_fc"}


def _check_keys(head: EagleHead, state: dict[str, torch.Tensor], speculators: bool) -> None:
    """Every stored weight is one the head reads, none is missing, each has its shape."""
    expected = head.state_dict()

    def names(keys: list[str]) -> str:  # as the file spells them (speculators: layers.0.*)
        return listed(k.replace("midlayer.", "layers.0.", 1) if speculators else k for k in keys)

    unread = sorted(set(state) - set(expected))
    if unread:
        flags = [
            flag for prefix, flag in _FLAGGED.items() if any(k.startswith(prefix) for k in unread)
        ]
        advice = (
            "; ".join(f'its config.json does not set "{flag}": true' for flag in flags)
            + " (set it if the head was trained with these weights)"
            if flags
            else "dropping them would make it draft wrongly; convert the head to a layout "
            "docs/eagle.md#formats lists, or train one here (specdec train eagle)"
        )
        raise SpecdecError(
            f"the EAGLE head holds weights its {head.kind} layout does not read: "
            f"{names(unread)}; {advice}"
        )
    missing = sorted(set(expected) - set(state))
    if missing:
        raise SpecdecError(
            f"the EAGLE head lacks {names(missing)}, which its {head.kind} layout and config.json "
            "need; the config and the weights belong to different heads"
        )
    check_shapes(
        ((names([key]), value, expected[key].shape) for key, value in state.items()),
        "the EAGLE head's",
        "its config.json",
        "the config and the weights belong to different heads",
    )


def head_from_state(
    config: LlamaConfig, state: dict[str, torch.Tensor], target_hidden: int, target_vocab: int
) -> EagleHead:
    """Build a head from a config and an official-layout state dict; check it fits the target."""
    state = {key.removeprefix("model."): value for key, value in state.items()}
    state.pop("embed_tokens.weight", None)
    speculators = "layers.0.hidden_norm.weight" in state
    state = _official_names(state)
    kind = head_kind(state)
    values = config.to_dict()
    declared = declared_kind(values)
    if declared is not None and declared != kind:
        names = {"eagle1": "EAGLE-1/2", "eagle3": "EAGLE-3"}
        raise SpecdecError(
            f"the head's config.json declares an {names[declared]} head but its weights are "
            f"in the {names[kind]} layout; the config and the weights belong to different heads"
        )
    if "fc.weight" not in state:
        raise SpecdecError(
            "the EAGLE head has no fc.weight: it does not fuse the target's hidden states "
            "through fc, which every layout read here does (docs/eagle.md#formats)"
        )
    hidden = state["fc.weight"].shape[0]
    if hidden != target_hidden or config.hidden_size != target_hidden:
        raise SpecdecError(
            f"the EAGLE head has hidden size {hidden} but the target has {target_hidden}; "
            "use a head trained for this target (or train one: specdec train eagle)"
        )
    stated = values.get("target_vocab_size") or config.vocab_size
    vocab = int(state["t2d"].shape[0]) if "t2d" in state else int(stated)
    if vocab != target_vocab:
        raise SpecdecError(
            f"the EAGLE head has a vocabulary of {vocab} tokens but the target has "
            f"{target_vocab}; use a head trained for this target"
        )
    if "d2t" in state and "t2d" not in state:  # ModelOpt: t2d is never saved
        ids = torch.arange(len(state["d2t"])) + state["d2t"].to(torch.long)
        state["t2d"] = torch.zeros(vocab, dtype=torch.bool)
        state["t2d"][ids] = True
    draft_vocab = int(state["d2t"].shape[0]) if "d2t" in state else 0
    if kind == "eagle3":
        draft_vocab = int(state["lm_head.weight"].shape[0])
        if "d2t" not in state:  # a full-vocabulary EAGLE-3 head: identity maps
            state["d2t"] = torch.zeros(draft_vocab, dtype=torch.long)
            state["t2d"] = torch.ones(vocab, dtype=torch.bool)
    variant = eagle3_variant(values) if kind == "eagle3" else OFFICIAL
    width = int(state["fc.weight"].shape[1])
    if kind == "eagle3" and width != variant.fused * hidden:
        named = list(variant.aux_layers) or "2, L//2 and L-3"
        raise SpecdecError(
            f"the EAGLE-3 head's fc reads {width} features, {width / hidden:g} target hidden "
            f"states of {hidden}, but its config.json names {variant.fused} (layers {named}); "
            "set eagle_aux_hidden_state_layer_ids to the target layers it was trained on"
        )
    config = LlamaConfig(**{**values, "vocab_size": vocab})
    bias = "fc.bias" in state
    layers = 1 + max((int(k.split(".")[1]) for k in state if k.startswith("layers.")), default=0)
    head = EagleHead(config, kind, bias, draft_vocab, layers, variant)
    state = {k: v.to(torch.long) if k == "d2t" else v for k, v in state.items()}
    _check_keys(head, state, speculators)
    head.load_state_dict(state)
    return head


def load_head(
    spec: str,
    target: LoadedModel,
    dtype: torch.dtype | None = None,
    progress: Progress | None = None,
    stop: StopFlag | None = None,
) -> EagleHead:
    """Load a head from a local directory or hub id, bound to `target` on its device, in
    `dtype` (default `models.drafting_dtype(target)`; training asks for float32)."""
    directory = _resolve(spec, progress, stop)
    if peagle.is_peagle_dir(directory):  # an EAGLE-3 head with P-EAGLE's additions
        variant = eagle3_variant(_read_config(directory, spec).to_dict())
        return peagle.load_peagle(directory, spec, variant, target, dtype)
    config = _read_config(directory, spec)
    state = _with_token_map(directory, read_weights(directory, spec), config)
    model = target.model
    head = head_from_state(
        config, state, model.config.hidden_size, model.get_output_embeddings().weight.shape[0]
    )
    head.to(device=target.device, dtype=dtype or drafting_dtype(target)).eval()
    fast_cpu_paths(head)
    return head.bind(model.get_input_embeddings(), model.get_output_embeddings())


def read_head(
    spec: str, progress: Progress | None = None, stop: StopFlag | None = None
) -> EagleHead:
    """A head as it is stored (its weights' float dtype, on the CPU), checked as `load_head`
    checks it but bound to no target: for writing it out again
    (specdec_core/serving/head_export.py)."""
    directory = _resolve(spec, progress, stop)
    if peagle.is_peagle_dir(directory):
        variant = eagle3_variant(_read_config(directory, spec).to_dict())
        return peagle.read_peagle(directory, spec, variant)
    config = _read_config(directory, spec)
    state = _with_token_map(directory, read_weights(directory, spec), config)
    t2d = next((v for k, v in state.items() if k.removeprefix("model.") == "t2d"), None)
    stated = config.to_dict().get("target_vocab_size") or config.vocab_size
    vocab = len(t2d) if t2d is not None else int(stated)
    stored = next((v.dtype for v in state.values() if v.is_floating_point()), torch.float32)
    head = head_from_state(config, state, config.hidden_size, vocab)
    return head.to(dtype=stored).eval()


def save_head(
    head: EagleHead,
    directory: str | Path,
    card: dict | None = None,
    dtype: torch.dtype = torch.float16,
) -> Path:
    """Save in the official layout (safetensors, `dtype`), plus the model card if given."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config = head.config.to_dict()
    layers = len(head.layers) if head.kind == "eagle1" else 1
    config.update(num_hidden_layers=layers, bias=head.kind == "eagle1" and head.fc.bias is not None)
    if head.draft_vocab:
        config["draft_vocab_size"] = head.draft_vocab
    if head.kind == "eagle3":
        config["architectures"] = ["LlamaForCausalLMEagle3"]
        config.pop("eagle_aux_hidden_state_layer_ids", None)
        config.update(variant_config(head.variant))
    config.pop("_attn_implementation_autoset", None)
    write_atomic(directory / "config.json", json.dumps(config, indent=2, default=str))
    state = {
        key: value.detach().to("cpu", dtype if value.is_floating_point() else value.dtype)
        for key, value in head.state_dict().items()
    }
    tensors = {k: v.contiguous() for k, v in state.items()}
    save_tensors_atomic(directory / "model.safetensors", tensors)
    if card is not None:
        write_atomic(directory / CARD, json.dumps(card, indent=2))
    return directory


def variant_config(variant: Eagle3Variant) -> dict:
    """An EAGLE-3 head's config.json flags for `variant`, written out whole: an absent flag
    means "off" to every reader."""
    config = {
        "fc_norm": variant.fc_norm,
        "norm_output": variant.norm_output,
        "norm_before_fc": variant.norm_before_fc,
        "norm_before_residual": variant.norm_before_residual,
    }
    if variant.aux_layers:
        config["eagle_aux_hidden_state_layer_ids"] = list(variant.aux_layers)
    if variant.window:
        config.update(layer_types=["sliding_attention"], sliding_window=variant.window)
    return config


def _read_config(directory: Path, spec: str) -> LlamaConfig:
    path = directory / "config.json"
    if not path.is_file():
        raise SpecdecError(f"{spec} has no config.json; is it an EAGLE head directory?")
    return LlamaConfig(**flat_config(json.loads(path.read_text())))


def _with_token_map(
    directory: Path, state: dict[str, torch.Tensor], config: LlamaConfig
) -> dict[str, torch.Tensor]:
    """An EAGLE-1/2 head's state with the draft vocabulary of SGLang's token map beside it
    (`TOKEN_MAP`) as d2t / t2d; the state itself when there is none. SGLang drafts over the
    map and ignores a d2t in the weights, so the two must name the same ids."""
    path = directory / TOKEN_MAP
    names = {key.removeprefix("model."): key for key in state}
    if not path.is_file() or layout_of(names) != "eagle1":
        return state
    vocab = int(config.to_dict().get("target_vocab_size") or config.vocab_size)
    try:
        ids = torch.as_tensor(torch.load(path, map_location="cpu", weights_only=True)).flatten()
    except (OSError, RuntimeError, ValueError, TypeError, EOFError, pickle.UnpicklingError):
        ids = torch.empty(0)
    if ids.is_floating_point() or not len(ids):  # not a list of ids: refused below
        ids = torch.full((1,), -1)
    ids = ids.to(torch.long)
    if ids.min() < 0 or ids.max() >= vocab or len(ids.unique()) != len(ids):
        raise SpecdecError(
            f"{path} is not a token map for this head: it must list distinct target ids below "
            f"{vocab}; export the head again (specdec export --head-out) or remove the file"
        )
    d2t = ids - torch.arange(len(ids))
    if "d2t" in names and not torch.equal(state[names["d2t"]].to(torch.long), d2t):
        raise SpecdecError(
            f"{path} and the head's d2t name different draft vocabularies, and SGLang drafts "
            "over the token map: export the head again (specdec export --head-out)"
        )
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[ids] = True
    return {**state, "d2t": d2t, "t2d": t2d}


def check_head_spec(spec: str) -> None:
    """Refuse a head `spec` that is neither a directory nor a hub id (before a model loads)."""
    path = Path(spec).expanduser()
    if path.is_dir():
        return
    if path.exists() or spec.startswith((".", "/", "~")) or not hub.is_hub_spec(spec):
        raise SpecdecError(f"EAGLE head not found: {spec}; give a head directory or a hub id")


def _resolve(spec: str, progress: Progress | None = None, stop: StopFlag | None = None) -> Path:
    """A head directory, or the hub snapshot of `owner/name[@revision]` holding only its
    config.json and weights."""
    check_head_spec(spec)
    path = Path(spec).expanduser()
    if path.is_dir():
        return path
    return hub.fetch(spec, what="EAGLE head", tokenizer=False, progress=progress, stop=stop)
