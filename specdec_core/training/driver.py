"""One training run: data -> target features -> the starting model -> `train` -> saved + card.

`train_from_request` is `specdec train`: it loads the target and collects `--data` itself
(data_sources.py). `train_on_samples` takes samples collected elsewhere (distill.py
answers prompts within a wall-clock budget) and does the rest the same way. Everything
expensive is cached under the request's work directory and reused by a rerun: generated
answers, feature shards, and the training checkpoint (a rerun resumes).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from specdec_core.environment import current_environment
from specdec_core.errors import SpecdecError
from specdec_core.models import LoadedModel, load_model
from specdec_core.training.card import ModelCard, Validation, trained_epochs
from specdec_core.training.data_sources import Collected, collect
from specdec_core.training.features import Featured, extract_features, feature_shards
from specdec_core.training.layout import Layout, layout_settings, resolve_layout
from specdec_core.training.loop import train
from specdec_core.training.magpie import evaluation_prompts
from specdec_core.training.objective import Objective
from specdec_core.training.progress_file import ProgressFile
from specdec_core.training.request import TrainRequest
from specdec_core.training.starting_model import head_layers, starting_model, trainable
from specdec_core.training.train_config import TrainConfig
from specdec_core.training.validation import (
    held_out_by_kind,
    teacher_forced_agreement,
    validation_by_kind,
    validation_tau,
)


@dataclass
class TrainingData:
    """Features to train on and to validate on, and the data mix the card records: sequences
    and tokens per source (`by_source`, in order), generated prompts per kind (`by_kind`)."""

    train: list[Featured] = field(default_factory=list)
    held: list[Featured] = field(default_factory=list)  # the first source's held-out samples
    held_prompts: list[list[int]] = field(default_factory=list)
    mix: dict = field(default_factory=lambda: {"by_source": {}, "by_kind": {}})


def _log(message: str) -> None:
    print(f"[train] {message}", file=sys.stderr, flush=True)


def train_from_request(request: TrainRequest) -> ModelCard:
    """`specdec train`: load the target, collect `request.data`, train and save; -> the card."""
    started = time.time()
    torch.manual_seed(request.seed)
    target = load_model(request.target, request.device, request.feature_dtype)
    layout = resolve_layout(request, target)  # a misfit --init is refused before any data
    exclude = evaluation_prompts(request.exclude_prompts)
    sources = (  # collected one by one, each turned into features before the next
        collect(source, target, budget, request.work_dir, request.max_len, request.seed,
                request.cached_only, exclude)
        for source, budget in zip(request.data, request.budgets, strict=True)
    )  # fmt: skip
    return train_on_samples(request, target, sources, layout=layout, started=started)


def train_on_samples(
    request: TrainRequest,
    target: LoadedModel,
    sources: Iterable[Collected],
    *,
    layout: Layout | None = None,
    started: float | None = None,
    stages: dict | None = None,
    device: str | None = None,
) -> ModelCard:
    """Train `request`'s model on `sources` and save it with its card in `request.out`;
    -> the card.

    Validation after each epoch runs on the first source's held-out samples (teacher-forced
    top-1; tau on up to `request.val_prompts` of its held-out prompts), and saves the model so
    far, so a run cut off keeps it. With `request.seconds`, training stops when that much time
    has passed since this call. `layout`: `resolve_layout`'s, if the caller checked it before
    collecting; `started` (time.time()): when the run began, for the card's train_seconds.
    `stages`, when given, gets the seconds of features and training (and the held-out top-1
    before training) and goes into the card, as does `device` (where it trained, if a caller
    records it).
    """
    began, started = time.monotonic(), started or time.time()
    target.model.requires_grad_(False)
    layout = layout or resolve_layout(request, target)
    data = _features(request, target, sources, layout.fused)
    if stages is not None:
        stages["features"] = {"seconds": round(time.monotonic() - began, 1)}
    if not data.train:
        raise SpecdecError("no training data; check --data and --tokens")
    config = train_config(request, layout)
    what = f"{layout.arch} head" if request.trains == "eagle" else "draft"
    objective = _starting_objective(request, config, layout, target, data.train)
    size = sum(p.numel() for p in trainable(objective.model, request.trains))
    _log(f"{what}: {size / 1e6:.1f}M trained parameters")
    lm_head = target.model.get_output_embeddings()
    if stages is not None:
        before = teacher_forced_agreement(objective.eval(), data.held, lm_head)
    out = Path(request.out)
    out.mkdir(parents=True, exist_ok=True)
    request.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    validate = _validation(request, target, data, out, layout.arch)
    if request.seconds:
        config.seconds = max(1.0, request.seconds - (time.monotonic() - began))
        _log(f"training for {config.seconds:.0f}s (at most {config.epochs} epochs)")
    training = time.monotonic()
    tokens = sum(len(item.ids) for item in data.train)
    progress = ProgressFile(Path(request.progress_file), tokens) if request.progress_file else None
    history = train(
        objective, data.train, config, request.checkpoint_dir, validate if data.held else None,
        progress.update if progress else None,
    )  # fmt: skip
    by_kind = _by_kind(request, target, objective, layout.fused) if request.val_kinds else None
    if stages is not None:
        stages["train"] = {
            "seconds": round(time.monotonic() - training, 1),
            "epochs": trained_epochs(history),
            "sequences": len(data.train),
            "tokens": tokens,
            "teacher_forced_top1_before": before,
            "history": [epoch.to_record() for epoch in history],
        }
    card = ModelCard(
        kind=request.trains,
        arch=layout.arch if request.trains == "eagle" else None,
        target=request.target,
        command=request.command,
        data=tuple(data.mix["by_source"]),
        tokens=tokens,
        sequences=len(data.train),
        epochs=trained_epochs(history),
        seed=request.seed,
        draft_vocab=len(objective.draft_ids),
        init=request.init,
        layers=head_layers(objective.model),
        history=tuple(history),
        validation=history[-1] if history else None,
        train_seconds=round(time.time() - started),
        train_config=config,
        data_mix=data.mix,
        device=device,
        environment=current_environment(target.device, request.command).to_record(),
        validation_by_kind=by_kind,
        stages=stages,
    )
    save_trained(request.trains, objective.model, target, out, card)
    if progress is not None:
        progress.finish(history)
    _log(f"saved the {what} to {out}")
    return card


def _starting_objective(
    request: TrainRequest,
    config: TrainConfig,
    layout: Layout,
    target: LoadedModel,
    data: list[Featured],
) -> Objective:
    """The objective over the model training starts from (`starting_model`): an EAGLE head
    with the layout's input noise and unrolled passes, or a token-level draft."""
    model, draft_ids = starting_model(
        request.trains, layout.init_head, target, data, config.draft_vocab, layout.arch,
        layout.depth, request.input_norms, layout.repick_vocab,
    )  # fmt: skip
    lm_head = target.model.get_output_embeddings()
    eagle = request.trains == "eagle"
    noise, unroll = (config.noise, config.unroll) if eagle else (0.0, 1)
    return Objective(request.trains, model, lm_head, draft_ids, noise, unroll)


def train_config(request: TrainRequest, layout: Layout) -> TrainConfig:
    """The training loop's settings for `request` on `layout` (the layout's loss weights and
    noise unless the request sets them)."""
    return TrainConfig(
        trains=request.trains,
        epochs=request.epochs,
        lr=request.lr,
        batch_tokens=request.batch_tokens,
        draft_vocab=layout.draft_vocab,
        seed=request.seed,
        unroll=request.unroll,
        save_every=request.save_every,
        **layout_settings(layout.arch, request.ce_weight, request.noise),
    )


def _validation(
    request: TrainRequest, target: LoadedModel, data: TrainingData, out: Path, arch: str
) -> Callable[[Objective], Validation]:
    """What each epoch ends with: teacher-forced top-1 on the held-out samples, tau on up to
    `request.val_prompts` held-out prompts; then the model so far is saved with a partial card
    (so a run cut off keeps it)."""
    lm_head = target.model.get_output_embeddings()
    arch_of = arch if request.trains == "eagle" else None

    def validate(objective: Objective) -> Validation:
        top1 = teacher_forced_agreement(objective, data.held, lm_head)
        tau = None
        if data.held_prompts and request.val_prompts:
            prompts = data.held_prompts[: request.val_prompts]
            tau = validation_tau(request.trains, objective.model, target, prompts)
        result = Validation(top1, tau)
        partial = ModelCard(kind=request.trains, arch=arch_of, partial=result)
        save_trained(request.trains, objective.model, target, out, partial)
        return result

    return validate


def _by_kind(
    request: TrainRequest, target: LoadedModel, objective: Objective, fused
) -> dict[str, Validation]:
    """The validation table by kind of request (`validation.validation_by_kind`)."""
    by_kind = held_out_by_kind(target, request.work_dir, request.val_kinds)
    taken = {
        kind: (prompts, _featured(request, target, answers, f"kinds-heldout-{kind}", fused))
        for kind, (prompts, answers) in by_kind.items()
    }
    table = validation_by_kind(request.trains, objective, target, taken)
    _log(f"validation by kind: {json.dumps({k: v.to_record() for k, v in table.items()})}")
    return table


def _featured(request: TrainRequest, target: LoadedModel, samples, name: str, fused, **kwargs):
    """Features of `samples`, in shards WORK/features-NAME (unless `cache_features` is off)."""
    shards = feature_shards(request.work_dir, name, fused) if request.cache_features else None
    return extract_features(target.model, samples, shards, layers=fused, **kwargs)


def _features(
    request: TrainRequest, target: LoadedModel, sources, fused: tuple[int, ...]
) -> TrainingData:
    """Each source's samples as features, in order; the held-out part is the first source's
    that has any."""
    data = TrainingData()
    for source in sources:
        tokens = sum(len(s.ids) for s in source.samples)
        _log(f"{source.name}: {len(source.samples)} sequences, {tokens} tokens")
        counts = {"sequences": len(source.samples), "tokens": tokens}
        data.mix["by_source"][source.source] = {**counts, **source.mix}
        for kind, count in source.mix.get("kinds", {}).items():
            data.mix["by_kind"][kind] = data.mix["by_kind"].get(kind, 0) + count
        data.train += _featured(
            request, target, source.samples, source.name, fused,
            batch_tokens=request.feature_batch_tokens,
            progress=lambda n, total, made: _log(f"features {n}/{total} sequences: {made} tokens"),
        )  # fmt: skip
        if source.held and not data.held:
            data.held = _featured(request, target, source.held, "heldout", fused)
            data.held_prompts = source.held_prompts
    return data


def save_trained(trains: str, model, target: LoadedModel, out: Path, card: ModelCard) -> None:
    """Save an EAGLE head (the official layout) or a token-level draft (without the target's
    embedding) with `card`."""
    if trains == "eagle":
        from specdec_core.eagle.formats import save_head

        save_head(model, out, card.to_record())
    else:
        from specdec_core.token_draft import save_draft

        save_draft(model, target.tokenizer, out, card.to_record())
