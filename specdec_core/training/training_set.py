"""The part of a training run every trainer shares (EAGLE heads and drafts, Medusa heads, the
MLP speculator): the `--data` sources' samples under one time budget, and the card's record of
the run.

`collect_samples` takes the sources one by one, as they are collected, and keeps their token
ids (`online_features.Sequences`): no feature is computed here; training computes the target's
features batch by batch as it needs them (online_features.py), so memory holds one batch of
features whatever the corpus size, and no feature file is written. The held-out part is the
first source's that has any (under a time budget, cut to a share of the training tokens:
`time_budget.held_within`). Under a budget, the trainer's `Probe` times a training step, its
target forward included, on the first samples before training: a budget that cannot cover one
batch is refused at once (`time_budget.refuse_unfit`), and no later source is collected once
the budget is spent. Every stage says where it is at least every few seconds: a line on stderr
and, with a progress file, the same in the file (`Reporter`).
"""

from __future__ import annotations

import itertools
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specdec_core.models.loading import LoadedModel
from specdec_core.training.card import ModelCard, trained_epochs
from specdec_core.training.common_request import TrainingData
from specdec_core.training.data_sources import Collected
from specdec_core.training.datasets import Sample
from specdec_core.training.online_features import Sequences
from specdec_core.training.progress_file import ProgressFile
from specdec_core.training.time_budget import (
    HEARTBEAT_S,
    Budget,
    Heartbeat,
    Probe,
    StageProgress,
    held_within,
    refuse_unfit,
)

TAU_TOKENS = 48  # what validation's tau decodes per held-out prompt (its default)

# (the first source's samples, its held-out prompts) -> the run's timings (time_budget.Probe)
Prober = Callable[[list, Sequence[list[int]]], Probe]


def log(message: str) -> None:
    print(f"[train] {message}", file=sys.stderr, flush=True)


@dataclass
class TrainingSet:
    """Samples to train on and to validate on, and the data mix the card records: sequences
    and tokens per source (`by_source`, in order), generated prompts per kind (`by_kind`)."""

    train: Sequences
    held: list[Sample] = field(default_factory=list)  # the first source's held-out samples
    held_prompts: list[list[int]] = field(default_factory=list)
    mix: dict = field(default_factory=lambda: {"by_source": {}, "by_kind": {}})
    tau_prompt_seconds: float = 0.0  # the probe's estimate of one held-out prompt's tau

    @property
    def tokens(self) -> int:
        return self.train.tokens


class Reporter:
    """Where a stage is, as a line on stderr (at most every `HEARTBEAT_S`, and whenever
    `force`d) and, with a progress file, in it."""

    def __init__(self, budget: Budget, progress: ProgressFile | None = None) -> None:
        self.budget, self.progress = budget, progress
        self.printed, self.last = 0.0, ""
        self._lock = threading.Lock()  # the stage's code and its heartbeat both report

    def __call__(self, stage: StageProgress, force: bool = False) -> None:
        with self._lock:
            now = time.monotonic()
            line = stage.line()
            if line != self.last and (force or now - self.printed >= HEARTBEAT_S - 0.5):
                log(line)
                self.printed, self.last = now, line
            if self.progress is not None:
                self.progress.stage(stage)


def collect_samples(
    sources: Iterable[Collected],
    names: Sequence[str],
    budget: Budget,
    batch_tokens: int,
    probe: Prober | None = None,
) -> TrainingSet:
    """Each source's samples, in order (`names`: the sources as given, for what is said); the
    held-out part is the first source's that has any. Under a budget (with the trainer's
    `probe`, timed on the first source): a budget that cannot cover one batch of
    `batch_tokens` is refused, and no source is collected once the budget is spent."""
    samples: list[Sample] = []
    held: list[Sample] = []
    held_prompts: list[list[int]] = []
    mix: dict = {"by_source": {}, "by_kind": {}}
    tau_seconds = 0.0
    pending = iter(sources)
    for index in itertools.count():
        if index and budget.over():
            if index < len(names):
                log(f"the time budget is spent: {', '.join(names[index:])} not collected")
            break
        source = _collected(pending, names[index] if index < len(names) else "data", budget)
        if source is None:
            break
        taken = source.samples
        tokens = sum(len(s.ids) for s in taken)
        if budget.seconds is not None and not samples and taken and probe is not None:
            timed = probe(taken, source.held_prompts)
            log(f"{timed.words(min(batch_tokens, tokens))}; {budget.words()}")
            refuse_unfit(timed, budget, tokens, batch_tokens)
            tau_seconds = timed.decode * TAU_TOKENS
        log(f"{source.name}: {len(taken)} sequences, {tokens} tokens")
        mix["by_source"][source.source] = {
            "sequences": len(taken), "tokens": tokens, **source.mix
        }  # fmt: skip
        for kind, count in source.mix.get("kinds", {}).items():
            mix["by_kind"][kind] = mix["by_kind"].get(kind, 0) + count
        samples += taken
        if source.held and not held:
            held = source.held if budget.seconds is None else held_within(source.held, tokens)
            held_prompts = source.held_prompts
    return TrainingSet(Sequences.of(samples), held, held_prompts, mix, tau_seconds)


def _collected(pending: Iterator[Collected], name: str, budget: Budget) -> Collected | None:
    """The next source of `pending` (None when there is none), saying every few seconds how
    long its collection (or generation) has run."""
    began = time.monotonic()

    def tick() -> None:
        left = f"; {budget.words()}" if budget.seconds is not None else ""
        log(f"collecting {name}: {time.monotonic() - began:.0f}s{left}")

    with Heartbeat(tick, HEARTBEAT_S):
        return next(pending, None)


def run_card(
    request: TrainingData,
    kind: str,
    data: TrainingSet,
    history: Sequence,
    started: float,
    target: LoadedModel,
    **fields: Any,
) -> ModelCard:
    """The card of a finished run: what every trainer records (target, command, data, sizes,
    history, time, environment), and the trainer's own `fields`."""
    from specdec_core.environment import current_environment

    command = request.command
    given: Mapping[str, Any] = {
        "target": request.target,
        "command": command,
        "data": tuple(data.mix["by_source"]),
        "tokens": data.tokens,
        "sequences": len(data.train),
        "epochs": trained_epochs(history),
        "seed": request.seed,
        "history": tuple(history),
        "validation": history[-1] if history else None,
        "train_seconds": round(time.time() - started),
        "data_mix": data.mix,
        "environment": current_environment(target.device, command).to_record(),
    }
    return ModelCard(kind=kind, **{**given, **fields})
