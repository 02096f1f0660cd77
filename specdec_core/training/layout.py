"""The layout a training run trains: EAGLE-1 or EAGLE-3, its depth, the --init head it continues,
and the target layers its features must hold; all checked before any data is collected. The
model itself is built in starting_model.py."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specdec_core.errors import SpecdecError
from specdec_core.heads.eagle.head import EagleHead, fused_layers
from specdec_core.models.loading import LoadedModel
from specdec_core.training.request import TrainRequest, check_depth
from specdec_core.training.starting_model import head_layers
from specdec_core.training.train_config import TrainConfig


@dataclass(frozen=True)
class Layout:
    arch: str  # eagle1 | eagle3 (a token-level draft: eagle1, which it ignores)
    depth: int  # decoder layers of the head
    fused: tuple[int, ...]  # target layers the features hold besides the last (EAGLE-3's)
    init_head: EagleHead | None = None  # the --init head, read in float32
    draft_vocab: int = TrainConfig.draft_vocab  # draft vocabulary size (0: the full vocabulary)
    repick_vocab: bool = False  # the --init head's weights with a new vocabulary from the data


def resolve_layout(request: TrainRequest, target: LoadedModel) -> Layout:
    """The layout `request` trains on `target`; refuses a misfit --init before any data."""
    fresh_vocab = TrainConfig.draft_vocab if request.draft_vocab is None else request.draft_vocab
    if request.trains != "eagle":
        return Layout("eagle1", 1, (), draft_vocab=fresh_vocab)
    init_head = read_init(request.init, target)
    arch = resolve_arch(request.arch, init_head)
    depth = resolve_layers(arch, init_head, request.layers)
    if init_head is None:
        return Layout(arch, depth, input_layers(arch, target), draft_vocab=fresh_vocab)
    size, repick = resolve_init_vocab(init_head, request.draft_vocab)
    return Layout(arch, depth, input_layers(arch, target), init_head, size, repick)


def resolve_init_vocab(init_head: EagleHead, draft_vocab: int | None) -> tuple[int, bool]:
    """-> (draft vocabulary size, whether it is picked anew from the data) for continuing
    `init_head`: its own vocabulary unless --draft-vocab gives another size, which an EAGLE-1
    head takes (it drafts through the target's lm_head rows, so its weights do not depend on
    the vocabulary); an EAGLE-3 head's lm_head is its vocabulary, so it keeps it."""
    have = init_head.draft_vocab
    if draft_vocab is None or draft_vocab == have:
        return have, False
    if init_head.kind == "eagle3":
        raise SpecdecError(
            f"the --init head is an EAGLE-3 head with a {have}-token draft vocabulary, which its "
            f"own lm_head holds; drop --draft-vocab to continue it, or drop --init to train a "
            f"fresh head with --draft-vocab {draft_vocab}"
        )
    return draft_vocab, True


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
    from specdec_core.run.runner import load_head

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
    if arch == "eagle3" and init_head.kind == "eagle1":
        return arch  # a fresh EAGLE-3 head started from the EAGLE-1 head's layer (starting_model)
    if arch and arch != init_head.kind:
        raise SpecdecError(
            f"the --init head is an {init_head.kind} head, so it cannot continue as --arch "
            f"{arch}; drop --arch, or drop --init to train a fresh {arch} head"
        )
    return init_head.kind


def input_layers(arch: str, target: LoadedModel) -> tuple[int, ...]:
    """Target hidden states the features must hold besides the last one (EAGLE-3's fused)."""
    return fused_layers(target.model.config.num_hidden_layers) if arch == "eagle3" else ()


def resolve_layers(arch: str, init_head, layers: int | None) -> int:
    """The decoder layers to train (--layers, else the --init head's, else 1); checked before
    any data is collected."""
    continues = init_head is not None and init_head.kind == arch
    have = head_layers(init_head) if continues else 1
    layers = have if layers is None else layers
    check_depth(arch, layers)
    if continues and layers < have:
        raise SpecdecError(
            f"the --init head has {have} decoder layers; --layers can add layers, not remove "
            f"them: give --layers {have} or more, or drop --init to train a fresh head"
        )
    return layers
