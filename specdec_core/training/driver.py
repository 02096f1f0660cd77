"""One training run: data -> the starting model -> `train` (the target's features computed
batch by batch) -> saved + card.

`train_from_request` is `specdec train`: it loads the target and collects `--data` itself
(data_sources.py). `train_on_samples` takes samples collected elsewhere (distill.py
answers prompts within a wall-clock budget) and does the rest the same way. Generated answers
are cached under the request's work directory and reused by a rerun; the target's features
are never stored: each training batch's are computed when it is trained on
(online_features.py), so memory holds one batch of them whatever the data's size. The training
checkpoint (the head, its optimiser and the data position) is saved every `--save-every` steps
and after each epoch; a rerun with the same OUT resumes from it and says so.

A time budget (`request.seconds`, a `Budget` from time_budget.py) is one budget for the whole
run, from the command's start: loading, collecting, training (features included), validation,
saving. After the first source is collected, one probe times a target forward and a training
step on a short sample: if what is left cannot cover one batch, the run says so at once, with
the budget or the batch size that would (a `SpecdecError`); no later source is collected once
the budget is spent, and training ends by the budget (common_training.py), keeping a reserve
for the last validation and the save. Under a budget, the held-out samples get at most a tenth
of the training tokens, tau is measured only while time is left, and the table by kind only
when training ended by its epochs with time to spare. Every stage says where it is at least
every few seconds: a line on stderr ("[train] training: 3,200 / 20,000 tokens, 152 tokens/s,
ETA 1m50s (epoch 1, batch 3/20 running 0m04s); budget 1m10s left") and, with
`--progress-file`, the same in the file.

On a CPU that emulates bfloat16 (no AVX-512 BF16 / AMX), `--feature-dtype bfloat16` loads the
target in float32: emulated, its forwards run many times slower.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path

import torch

from specdec_core.errors import SpecdecError
from specdec_core.models.loading import LoadedModel
from specdec_core.training.card import ModelCard, Validation, trained_epochs
from specdec_core.training.data_sources import Collected
from specdec_core.training.layout import Layout, layout_settings, resolve_layout
from specdec_core.training.loop import train, train_step
from specdec_core.training.objective import Objective
from specdec_core.training.online_features import Sequences, target_features
from specdec_core.training.progress_file import ProgressFile
from specdec_core.training.request import TrainRequest
from specdec_core.training.starting_model import head_layers, starting_model, trainable
from specdec_core.training.time_budget import Budget, Probe, fastest, probe_sample, reserve
from specdec_core.training.train_config import TrainConfig
from specdec_core.training.training_set import (
    Reporter,
    TrainingSet,
    collect_samples,
    log,
    run_card,
)
from specdec_core.training.validation import (
    by_kind_table,
    head_validation,
    held_features,
    teacher_forced_agreement,
    validation_tau,
)

PROBE_DECODE_TOKENS = 4  # of validation's tau decoding, timed by the probe


def train_from_request(request: TrainRequest) -> ModelCard:
    """`specdec train`: load the target, collect `request.data`, train and save; -> the card.
    A time budget counts from here."""
    budget = Budget(request.seconds)
    started = time.time()
    target = request.load_target()
    layout = resolve_layout(request, target)  # a misfit --init is refused before any data
    sources = request.collected(target)  # each turned into features before the next
    return train_on_samples(request, target, sources, layout=layout, started=started, budget=budget)


def train_on_samples(
    request: TrainRequest,
    target: LoadedModel,
    sources: Iterable[Collected],
    *,
    layout: Layout | None = None,
    started: float | None = None,
    stages: dict | None = None,
    device: str | None = None,
    budget: Budget | None = None,
) -> ModelCard:
    """Train `request`'s model on `sources` and save it with its card in `request.out`;
    -> the card.

    Validation after each epoch runs on the first source's held-out samples (teacher-forced
    top-1; tau on up to `request.val_prompts` of its held-out prompts), and saves the model so
    far, so a run cut off keeps it. With `request.seconds`, the whole run (collecting the
    sources included) ends by that much time after this call, or by `budget` (the caller's,
    started earlier: module docstring). `layout`: `resolve_layout`'s, if the caller checked it
    before collecting; `started` (time.time()): when the run began, for the card's
    train_seconds. `stages`, when given, gets the seconds of collecting the data and of
    training (and the held-out top-1 before training) and goes into the card, as does `device`
    (where it trained, if a caller records it).
    """
    began, started = time.monotonic(), started or time.time()
    budget = budget or Budget(request.seconds)
    target.model.requires_grad_(False)
    layout = layout or resolve_layout(request, target)
    config = train_config(request, layout)
    progress = ProgressFile(Path(request.progress_file), 0) if request.progress_file else None
    report = Reporter(budget, progress)
    data = collect_samples(
        sources, request.data, budget, config.batch_tokens,
        lambda samples, held: _probe(request, target, layout, config, samples, held),
    )  # fmt: skip
    if stages is not None:
        stages["data"] = {"seconds": round(time.monotonic() - began, 1)}
    if not len(data.train) and budget.over():
        raise SpecdecError(
            f"the time budget of {budget.seconds:.0f}s was spent before training began "
            "(collecting the data took it); what was generated is kept in the work folder, so "
            "a rerun starts further on, or give more --seconds"
        )
    if not len(data.train):
        raise SpecdecError("no training data; check --data and --tokens")
    what = f"{layout.arch} head" if request.trains == "eagle" else "draft"
    objective = _starting_objective(request, config, layout, target, data.train)
    size = sum(p.numel() for p in trainable(objective.model, request.trains))
    log(f"{what}: {size / 1e6:.1f}M trained parameters")
    lm_head = target.model.get_output_embeddings()
    held = held_features(target, data.held, layout.fused)
    if stages is not None:
        before = teacher_forced_agreement(objective.eval(), held, lm_head)
    out = Path(request.out)
    out.mkdir(parents=True, exist_ok=True)
    request.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    validate = _validation(request, target, data, held, out, layout.arch, budget)
    if budget.seconds is not None:
        config.seconds = max(1.0, budget.left() - reserve(budget))
        log(
            f"training for at most {config.seconds:.0f}s of the budget's "
            f"{budget.seconds:.0f}s ({budget.spent():.0f}s spent; at most {config.epochs} epochs)"
        )
    training = time.monotonic()
    tokens = data.tokens
    if progress is not None:
        progress.tokens = tokens
    history = train(
        objective, target, data.train, layout.fused, config, request.checkpoint_dir,
        validate if held else None, progress.update if progress else None,
        lambda clock: report(replace(clock.progress(), budget_left_s=budget.left())),
    )  # fmt: skip
    by_kind = None
    if request.val_kinds and _time_for_by_kind(budget, history):
        measure = head_validation(request.trains, objective, target)
        by_kind = by_kind_table(target, request.work_dir, request.val_kinds, layout.fused, measure)
    if stages is not None:
        stages["train"] = {
            "seconds": round(time.monotonic() - training, 1),
            "epochs": trained_epochs(history),
            "sequences": len(data.train),
            "tokens": tokens,
            "teacher_forced_top1_before": before,
            "history": [epoch.to_record() for epoch in history],
        }
    card = run_card(
        request, request.trains, data, history, started, target,
        arch=layout.arch if request.trains == "eagle" else None,
        draft_vocab=len(objective.draft_ids),
        init=request.init,
        layers=head_layers(objective.model),
        train_config=config,
        device=device,
        validation_by_kind=by_kind,
        stages=stages,
    )  # fmt: skip
    save_trained(request.trains, objective.model, target, out, card)
    if progress is not None:
        progress.finish(history)
    log(f"saved the {what} to {out}")
    return card


def _starting_objective(
    request: TrainRequest,
    config: TrainConfig,
    layout: Layout,
    target: LoadedModel,
    data: Sequences,
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


def _time_for_by_kind(budget: Budget, history) -> bool:
    """Under a budget, the table by kind (the target answers held-out prompts of every kind)
    only when training ended by its epochs with time to spare; said when skipped."""
    left = budget.left()
    ended_by_time = bool(history) and history[-1].stopped == "time"
    if left is None or (not ended_by_time and left > 2 * reserve(budget)):
        return True
    log(
        "validation by kind skipped: the time budget is spent (`specdec validate` measures "
        "it on the saved head)"
    )
    return False


def _validation(
    request: TrainRequest,
    target: LoadedModel,
    data: TrainingSet,
    held: list,
    out: Path,
    arch: str,
    budget: Budget | None = None,
) -> Callable[[Objective], Validation]:
    """What each epoch ends with: teacher-forced top-1 on the held-out samples (`held`: their
    features, `validation.held_features`), tau on up to
    `request.val_prompts` held-out prompts (under a `budget` prompt by prompt, only while the
    time left exceeds the reserve and the slowest prompt so far); then the model so far is
    saved with a partial card (so a run cut off keeps it)."""
    lm_head = target.model.get_output_embeddings()
    arch_of = arch if request.trains == "eagle" else None
    budget = budget or Budget(None)
    tau_seconds = [data.tau_prompt_seconds]  # the slowest prompt so far (first: the probe's)

    def time_for_tau() -> bool:
        left = budget.left()
        return left is None or left > reserve(budget) + tau_seconds[0]

    def measured_tau(objective: Objective) -> float | None:
        """Tau on the held-out prompts; under a budget prompt by prompt, while the time left
        exceeds the reserve and the slowest prompt so far (their mean, then)."""
        prompts = data.held_prompts[: request.val_prompts]
        if budget.seconds is None:
            return validation_tau(request.trains, objective.model, target, prompts)
        taus = []
        for prompt in prompts:
            if not time_for_tau():
                break
            began = time.monotonic()
            taus.append(validation_tau(request.trains, objective.model, target, [prompt]))
            tau_seconds[0] = max(tau_seconds[0], time.monotonic() - began)
        return sum(taus) / len(taus) if taus else None

    def validate(objective: Objective) -> Validation:
        top1 = teacher_forced_agreement(objective, held, lm_head)
        tau = None
        if data.held_prompts and request.val_prompts:
            tau = measured_tau(objective)
        result = Validation(top1, tau)
        partial = ModelCard(kind=request.trains, arch=arch_of, partial=result)
        save_trained(request.trains, objective.model, target, out, partial)
        return result

    return validate


def _probe(
    request: TrainRequest,
    target: LoadedModel,
    layout: Layout,
    config: TrainConfig,
    samples,
    held_prompts: Sequence[list[int]] = (),
) -> Probe:
    """Time the features and one training step (no optimiser update: a throwaway model) on
    the first samples (`time_budget.probe_sample`), and with `held_prompts` validation's
    decoding of a few tokens; the random state is left as it was."""
    taken = probe_sample(samples, config.batch_tokens)
    rows = [(s.ids, s.start) for s in taken]
    made = []
    with torch.random.fork_rng(devices=[]):
        features = fastest(lambda: made.append(target_features(target, rows, layout.fused)))
        items = made[-1]
        objective = _starting_objective(request, config, layout, target, Sequences.of(taken))
        params = trainable(objective.model, request.trains)
        for p in params:
            p.requires_grad_(True)
        still = torch.optim.SGD(params, lr=0.0)
        objective.train()
        training = fastest(lambda: train_step(objective, items, still, params, config.ce_weight))
        decode = 0.0
        if held_prompts and request.val_prompts:  # validation's tau decodes: time a few tokens
            began = time.monotonic()
            validation_tau(
                request.trains, objective.model, target, held_prompts[:1],
                max_new_tokens=PROBE_DECODE_TOKENS,
            )  # fmt: skip
            decode = (time.monotonic() - began) / PROBE_DECODE_TOKENS
    tokens = max(1, sum(len(s.ids) for s in taken))
    return Probe(features / tokens, training / tokens, decode)


def save_trained(trains: str, model, target: LoadedModel, out: Path, card: ModelCard) -> None:
    """Save an EAGLE head (the official layout) or a token-level draft (without the target's
    embedding) with `card`."""
    if trains == "eagle":
        from specdec_core.heads.eagle.formats import save_head

        save_head(model, out, card.to_record())
    else:
        from specdec_core.heads.token_draft import save_draft

        save_draft(model, target.tokenizer, out, card.to_record())
