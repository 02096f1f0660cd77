"""Read a model's native MTP layer from its own checkpoint, as its serving engines read it.

`load_mtp(spec, target)` finds the MTP weights among the checkpoint's tensor names (headers
only: a sharded checkpoint of hundreds of gigabytes is never read whole), recognises the
family's layout (layouts.py), builds the wrapper around a block of the target's own decoder
layer class (module.py) and loads the first MTP layer into it; the target's embedding,
lm_head, RoPE and final norm are bound, not copied. `spec` None, "" or the target's own spec
reads the target's checkpoint (`LoadedModel.source`); another directory or hub id reads that
one (a copy of the same model).

What is read, per the engines' loaders (vLLM, SGLang):
- every MTP weight must be one the layout reads: an unknown name under the MTP prefixes
  (`mtp.*`, `model.mtp_layers.*`, `model.layers.{i}.*` past the target's last layer) is a
  SpecdecError naming it; a missing one too; shapes must match the target's config;
- per-expert weights (`mlp.experts.{e}.gate_proj/up_proj/down_proj.weight`) become
  transformers' stacked expert tensors (`mlp.experts.gate_up_proj`, gate rows first, and
  `mlp.experts.down_proj`), as transformers itself converts them for the target's layers;
- DeepSeek-V3 / GLM-4.5 store a copy of the embedding in the MTP layer (`embed_tokens`):
  recognised and not read, the target's is used (vLLM shares the target's when the shapes
  match, SGLang always); `shared_head.head` is read where stored, else the target's lm_head;
- a checkpoint with several MTP layers is checked whole and drafts with the first (every
  published one has a single layer; vLLM, given one, reuses it at every draft step);
- tensors take the target's dtype, except those the target's class keeps in float32
  (`_keep_in_fp32_modules_strict`: DeepSeek-V3's router and its score correction bias).
Quantized MTP weights (FP8 block scales) are refused by name.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from torch import nn

from specdec_core.control import Progress
from specdec_core.errors import SpecdecError
from specdec_core.heads.mtp.layouts import (
    HEAD,
    LAYOUTS,
    MtpLayout,
    is_mtp_key,
    layouts_of,
    stated_count,
)
from specdec_core.heads.mtp.module import MtpModule, block_config
from specdec_core.models import hub
from specdec_core.models.checkpoint import check_weights, safetensors_header
from specdec_core.models.loading import LoadedModel, fast_cpu_paths
from specdec_core.models.weights_file import check_shapes


@dataclass(frozen=True)
class _Source:
    """What a module tensor is made of: one checkpoint tensor, or every expert's, stacked."""

    kind: str  # "tensor", "gate_up" (each expert's gate_proj then up_proj) or "down"
    keys: tuple[str, ...]


# one expert's projection, as checkpoints store it
_EXPERT = re.compile(r"^(?P<experts>.+\.experts)\.(?P<e>\d+)\.(?P<proj>\w+_proj)\.weight$")


def load_mtp(spec: str | None, target: LoadedModel, progress: Progress | None = None) -> MtpModule:
    """The target's MTP layer as a draft module, on its device (see the module docstring)."""
    directory, label = _directory(spec, target, progress)
    config = target.model.config.get_text_config(decoder=True)
    layers = int(config.num_hidden_layers)
    files = check_weights(directory, label)
    names = {path: _tensor_names(path) for path in files}
    found = [key for keys in names.values() for key in keys if is_mtp_key(key, layers)]
    if not found:
        raise SpecdecError(
            f"{label} has no MTP layers (none of mtp.*, model.mtp_layers.*, or "
            f"model.layers.{layers}.*); native MTP drafting needs a checkpoint that ships them "
            f"({', '.join(layout.families for layout in LAYOUTS)})"
        )
    layout = _layout(found, layers, label)
    mapped = {key: layout.module_name(key, layers) for key in found}
    unknown = sorted(key for key, where in mapped.items() if where is None)
    if unknown:
        raise _unread(unknown, label)
    counts = sorted({k for k, _ in mapped.values()})
    if counts != list(range(len(counts))):
        raise SpecdecError(
            f"{label}'s MTP layers are numbered {counts} past the target's {layers} layers; "
            "they must be 0, 1, ... (is the config's num_hidden_layers that of this checkpoint?)"
        )
    stated = stated_count(config.to_dict())
    if stated is not None and stated != len(counts):
        raise SpecdecError(
            f"{label} holds {len(counts)} MTP layer(s) but its config says {stated}; "
            "the config and the weights belong to different checkpoints"
        )
    by_layer = [
        {name: key for key, (k, name) in mapped.items() if k == layer and name} for layer in counts
    ]
    module = _build(target, layout, layers, head=any(n.startswith(HEAD + ".") for n in by_layer[0]))
    expected = module.state_dict()
    plans = [
        _plan(names_k, expected, lambda name, k=k: layout.checkpoint_name(name, layers, k), label)
        for k, names_k in enumerate(by_layer)
    ]
    state = _read(plans[0], names)
    _load(module, state, expected, target, lambda name: layout.checkpoint_name(name, layers))
    model = target.model
    _, norm, rotary = _target_parts(target)
    module.bind(model.get_input_embeddings(), model.get_output_embeddings(), rotary, norm)
    fast_cpu_paths(module)
    return module.eval()


def _directory(
    spec: str | None, target: LoadedModel, progress: Progress | None
) -> tuple[Path, str]:
    if not spec or spec == target.spec:
        return Path(target.source), target.spec
    path = Path(spec).expanduser()
    if path.is_dir():
        return path, spec
    if path.exists() or spec.startswith((".", "/", "~")) or not hub.is_hub_spec(spec):
        raise SpecdecError(
            f"MTP checkpoint not found: {spec}; give the target's own directory or hub id "
            "(or nothing: the target's checkpoint is read)"
        )
    return hub.fetch(spec, what="MTP checkpoint", tokenizer=False, progress=progress), spec


def _tensor_names(path: Path) -> list[str]:
    if path.suffix == ".safetensors":
        return [key for key in safetensors_header(path) if key != "__metadata__"]
    return list(torch.load(path, map_location="meta", weights_only=True))


def _layout(found: list[str], layers: int, label: str) -> MtpLayout:
    layouts = layouts_of(found, layers)
    if len(layouts) == 1:
        return layouts[0]
    if not layouts:
        raise SpecdecError(
            f"{label} holds MTP-like weights in no layout read here, e.g. "
            f"{', '.join(sorted(found)[:4])}; docs/mtp.md lists the layouts"
        )
    raise SpecdecError(
        f"{label} holds MTP weights in two layouts ({', '.join(x.name for x in layouts)}); "
        "the checkpoint mixes two models"
    )


def _target_parts(target: LoadedModel) -> tuple[nn.Module, nn.Module, nn.Module]:
    """The target's first decoder layer, final norm and rotary embedding (transformers'
    `model.layers`, `model.norm`, `model.rotary_emb`)."""
    inner = target.model.model
    try:
        return inner.layers[0], inner.norm, inner.rotary_emb
    except AttributeError:
        raise SpecdecError(
            f"{target.spec} is not built as transformers' decoder-only models are (model.layers, "
            "model.norm, model.rotary_emb); its MTP layer cannot be built around its own layers"
        ) from None


def _build(target: LoadedModel, layout: MtpLayout, layers: int, head: bool) -> MtpModule:
    """The module around a block of the target's own decoder layer class, its tensors on
    the meta device until the checkpoint's are assigned."""
    model = target.model
    config = model.config.get_text_config(decoder=True)
    layer, norm, _ = _target_parts(target)
    block_class, norm_class = type(layer), type(norm)
    configured = block_config(config, layout, layout.block_index(layers, 0))
    configured.vocab_size = int(model.get_output_embeddings().weight.shape[0])
    with torch.device("meta"):
        block = block_class(configured, 0)
        return MtpModule(layout, configured, block, norm_class, head=head)


def _plan(
    names: dict[str, str],
    expected: dict[str, torch.Tensor],
    spelled: Callable[[str], str],
    label: str,
) -> dict[str, _Source]:
    """Module name -> what it is made of; every key of the layer must be used and every
    module tensor made. `spelled(name)`: the checkpoint's name of a module tensor."""
    plan: dict[str, _Source] = {}
    experts: dict[str, dict[tuple[int, str], str]] = {}
    unread: list[str] = []
    for name, key in names.items():
        if name in expected:
            plan[name] = _Source("tensor", (key,))
            continue
        stacked, part = _stacked(name)
        if stacked in expected:
            experts.setdefault(stacked, {})[part] = key
        else:
            unread.append(key)
    for stacked, parts in experts.items():
        count = int(expected[stacked].shape[0])
        projs = ("down_proj",) if stacked.endswith("down_proj") else ("gate_proj", "up_proj")
        wanted = [(e, proj) for e in range(count) for proj in projs]
        unread += [key for part, key in parts.items() if part not in wanted]
        absent = [f"experts.{e}.{proj}" for e, proj in wanted if (e, proj) not in parts]
        if absent:
            raise SpecdecError(
                f"{label}'s MTP layer lacks {', '.join(absent[:4])} of "
                f"{spelled(stacked).rsplit('.', 1)[0]}, which the target's config "
                f"({count} experts) needs; the checkpoint is incomplete"
            )
        kind = "down" if stacked.endswith("down_proj") else "gate_up"
        plan[stacked] = _Source(kind, tuple(parts[part] for part in wanted))
    if unread:
        raise _unread(sorted(unread), label)
    missing = [spelled(name) for name in sorted(set(expected) - set(plan))]
    if missing:
        raise SpecdecError(
            f"{label}'s MTP layer lacks {', '.join(missing[:6])}, which the target's own layer "
            "class and config need; the checkpoint is incomplete or belongs to another model"
        )
    return plan


def _stacked(name: str) -> tuple[str, tuple[int, str]]:
    """`...experts.{e}.gate_proj.weight` -> ('...experts.gate_up_proj', (e, 'gate_proj'));
    ('', ...) for a name that is no expert's projection."""
    match = _EXPERT.match(name)
    if match is None or match["proj"] not in ("gate_proj", "up_proj", "down_proj"):
        return "", (0, "")
    stacked = "down_proj" if match["proj"] == "down_proj" else "gate_up_proj"
    return f"{match['experts']}.{stacked}", (int(match["e"]), match["proj"])


def _unread(keys: list[str], label: str) -> SpecdecError:
    shown = ", ".join(keys[:6]) + (f" and {len(keys) - 6} more" if len(keys) > 6 else "")
    quantized = any(key.endswith(("_scale_inv", "_scale", ".scales", ".qweight")) for key in keys)
    advice = (
        "quantized MTP weights are not read here; use the model's BF16 checkpoint"
        if quantized
        else "its layout has no such weight and drafting without it would be wrong; "
        "docs/mtp.md lists what is read"
    )
    return SpecdecError(f"{label} holds MTP weights this reader does not know: {shown}; {advice}")


def _read(plan: dict[str, _Source], names: dict[Path, list[str]]) -> dict[str, torch.Tensor]:
    """Read only the planned keys, from the files that hold them; stack the experts."""
    where = {key: path for path, keys in names.items() for key in keys}
    wanted = {key for source in plan.values() for key in source.keys}
    tensors: dict[str, torch.Tensor] = {}
    for path in sorted({where[key] for key in wanted}):
        keys = [key for key in wanted if where[key] == path]
        if path.suffix == ".safetensors":
            with safe_open(str(path), framework="pt") as handle:
                tensors.update({key: handle.get_tensor(key) for key in keys})
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
            tensors.update({key: state[key] for key in keys})
    state: dict[str, torch.Tensor] = {}
    for name, source in plan.items():
        keys = source.keys
        if source.kind == "tensor":
            state[name] = tensors[keys[0]]
        elif source.kind == "gate_up":  # (gate_0, up_0, gate_1, up_1, ...): gate rows first
            pairs = zip(keys[0::2], keys[1::2], strict=True)
            state[name] = torch.stack([torch.cat([tensors[g], tensors[u]]) for g, u in pairs])
        else:
            state[name] = torch.stack([tensors[key] for key in keys])
    return state


def _load(
    module: MtpModule,
    state: dict[str, torch.Tensor],
    expected: dict[str, torch.Tensor],
    target: LoadedModel,
    spelled: Callable[[str], str],
) -> None:
    """Check shapes, cast, and assign the tensors into the meta module, on the target's device."""
    keep = type(target.model)._keep_in_fp32_modules_strict or []
    check_shapes(
        ((spelled(name), value, expected[name].shape) for name, value in state.items()),
        "the MTP layer's", "the target's config", "the checkpoint belongs to another model",
    )  # fmt: skip
    for name, value in state.items():
        dtype = torch.float32 if any(part in name for part in keep) else target.dtype
        if value.is_floating_point():
            state[name] = value.to(device=target.device, dtype=dtype)
    module.load_state_dict(state, strict=True, assign=True)
    left = [name for name, t in [*module.named_parameters(), *module.named_buffers()] if t.is_meta]
    if left:  # a tensor the layer class makes itself, outside its state dict
        raise SpecdecError(
            f"the target's layer class keeps {', '.join(left[:4])} outside its weights; "
            "its MTP layer cannot be built here"
        )
