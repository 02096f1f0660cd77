"""The model a training run starts from: its layout, depth and draft vocabulary, the --init
head it continues, and the target layers its features must hold."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from specdec_core.eagle.head import OFFICIAL, Eagle3Variant, fused_layers
from specdec_core.eagle.train import TrainConfig, build_model, frequent_tokens
from specdec_core.errors import SpecdecError
from specdec_core.models import LoadedModel
from specdec_core.training.request import TrainRequest, check_depth

if TYPE_CHECKING:
    from specdec_core.eagle.head import EagleHead


@dataclass(frozen=True)
class Layout:
    arch: str  # eagle1 | eagle3 (a token-level draft: eagle1, which it ignores)
    depth: int  # decoder layers of the head
    fused: tuple[int, ...]  # target layers the features hold besides the last (EAGLE-3's)
    init_head: EagleHead | None = None  # the --init head, read in float32


def resolve_layout(request: TrainRequest, target: LoadedModel) -> Layout:
    """The layout `request` trains on `target`; refuses a misfit --init before any data."""
    if request.trains != "eagle":
        return Layout("eagle1", 1, ())
    init_head = read_init(request.init, target)
    arch = resolve_arch(request.arch, init_head)
    depth = resolve_layers(arch, init_head, request.layers)
    return Layout(arch, depth, input_layers(arch, target), init_head)


def layout_settings(arch: str, ce_weight: float | None, noise: float | None = None) -> dict:
    """TrainConfig fields that follow the layout: EAGLE-3 has no input noise and only the token
    loss (weight 1); EAGLE-1 weighs it 0.1 beside the feature loss. --ce-weight and --noise
    override."""
    eagle3 = arch == "eagle3"
    default = 1.0 if eagle3 else TrainConfig.ce_weight
    default_noise = 0.0 if eagle3 else TrainConfig.noise
    return {
        "arch": arch,
        "ce_weight": default if ce_weight is None else ce_weight,
        "noise": default_noise if noise is None else noise,
    }


def read_init(init: str | None, target: LoadedModel):
    """The --init head, read once in float32 (not through a bf16 target's rounding), or None."""
    if not init:
        return None
    from specdec_core.runner import load_head

    head = load_head(init, target, torch.float32)
    if not head.draft_vocab:
        raise SpecdecError(
            f"--init {init}: the trainer continues heads with a reduced draft vocabulary "
            "(d2t / t2d); this one drafts over the full vocabulary"
        )
    return head


def resolve_arch(arch: str | None, init_head) -> str:
    """The head layout to train: --arch, else the --init head's (`read_init`), else eagle1."""
    if init_head is None:
        return arch or "eagle1"
    if arch and arch != init_head.kind:
        raise SpecdecError(
            f"the --init head is an {init_head.kind} head, so it cannot continue as --arch "
            f"{arch}; drop --arch, or drop --init to train a fresh {arch} head"
        )
    return init_head.kind


def input_layers(arch: str, target: LoadedModel) -> tuple[int, ...]:
    """Target hidden states the features must hold besides the last one (EAGLE-3's fused)."""
    return fused_layers(target.model.config.num_hidden_layers) if arch == "eagle3" else ()


def starting_model(
    trains: str,
    init_head,
    target: LoadedModel,
    data,
    draft_vocab: int,
    arch="eagle1",
    layers=1,
    input_norms: bool = False,
):
    """-> (model to train, its draft vocabulary's target ids), on the target's device.

    With `init_head` (`read_init`): its layout, weights and draft vocabulary; `layers`
    (`resolve_layers`) more than it has grows it by layers whose output projections are zero
    (it drafts as before until trained). Without: a fresh model (layout `arch`, `layers`
    decoder layers; `input_norms`: EAGLE 3.1's RMSNorm per fused target state before `fc`)
    on the `draft_vocab` most frequent tokens of `data` (0 = all).
    """
    vocab = target.vocab_size
    if init_head is None:
        draft_ids = frequent_tokens(data, min(draft_vocab or vocab, vocab), vocab)
        draft_ids = draft_ids.to(target.device)
        variant = Eagle3Variant(fc_norm=True) if input_norms else OFFICIAL
        return build_model(trains, target.model, draft_ids, arch, layers, variant), draft_ids
    draft_ids = init_head.draft_ids()
    have = head_layers(init_head)
    layers = max(layers, have)
    model = build_model(trains, target.model, draft_ids, init_head.kind, layers, init_head.variant)
    missing, _ = model.load_state_dict(init_head.state_dict(), strict=False)
    if layers > have:
        with torch.no_grad():
            for layer in model.layers[have:]:
                layer.self_attn.o_proj.weight.zero_()
                layer.mlp.down_proj.weight.zero_()
    elif missing:
        raise SpecdecError(f"the --init head lacks weights: {', '.join(missing[:4])}")
    return model, draft_ids


def resolve_layers(arch: str, init_head, layers: int | None) -> int:
    """The decoder layers to train (--layers, else the --init head's, else 1); checked before
    any data is collected."""
    have = head_layers(init_head) if init_head is not None else 1
    layers = have if layers is None else layers
    check_depth(arch, layers)
    if init_head is not None and layers < have:
        raise SpecdecError(
            f"the --init head has {have} decoder layers; --layers can add layers, not remove "
            f"them: give --layers {have} or more, or drop --init to train a fresh head"
        )
    return layers


def head_layers(model) -> int:
    """Decoder layers of a model being trained (an EAGLE-3 head's midlayer counts as one)."""
    layers = getattr(model, "layers", None)
    return len(layers) if layers is not None else 1
