"""The part of a training run every trainer shares (EAGLE heads and drafts, Medusa heads, the
MLP speculator): the sources' samples turned into the target's features, under one time
budget, and the card's record of the run.

`collect_features` takes the `--data` sources one by one, as they are collected, and turns each
into features (features.py; shards WORK/features-NAME reused by a rerun). The held-out part is
the first source's that has any. Under a time budget (`Budget`), a `Probe` (the trainer's:
time_budget.py) times a feature forward and a training step on the first samples before any
features are taken: a budget that cannot cover one batch is refused at once, and the features
take the share that leaves training time for the epochs asked (`time_budget.features_until`);
no source is collected and no forward starts once that share is spent, and a resumed run (a
checkpoint in its folder) takes exactly the sequences its checkpoint was trained on. Every
stage says where it is at least every few seconds: a line on stderr and, with a progress file,
the same in the file (`Reporter`).
"""

from __future__ import annotations

import itertools
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specdec_core.models.loading import LoadedModel
from specdec_core.training.card import ModelCard, trained_epochs
from specdec_core.training.common_request import TrainingData
from specdec_core.training.common_training import saved_plan
from specdec_core.training.data_sources import Collected
from specdec_core.training.features import Featured, extract_features, feature_shards
from specdec_core.training.progress_file import ProgressFile
from specdec_core.training.time_budget import (
    HEARTBEAT_S,
    Budget,
    Heartbeat,
    Probe,
    StageClock,
    StageProgress,
    features_until,
    held_within,
)

TAU_TOKENS = 48  # what validation's tau decodes per held-out prompt (its default)

# (the first source's samples, its held-out prompts) -> the run's timings (time_budget.Probe)
Prober = Callable[[list, Sequence[list[int]]], Probe]


def log(message: str) -> None:
    print(f"[train] {message}", file=sys.stderr, flush=True)


@dataclass
class FeatureSet:
    """Features to train on and to validate on, and the data mix the card records: sequences
    and tokens per source (`by_source`, in order), generated prompts per kind (`by_kind`)."""

    train: list[Featured] = field(default_factory=list)
    held: list[Featured] = field(default_factory=list)  # the first source's held-out samples
    held_prompts: list[list[int]] = field(default_factory=list)
    mix: dict = field(default_factory=lambda: {"by_source": {}, "by_kind": {}})
    tau_prompt_seconds: float = 0.0  # the probe's estimate of one held-out prompt's tau

    @property
    def tokens(self) -> int:
        return sum(len(item.ids) for item in self.train)


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


@dataclass(frozen=True)
class FeatureSettings:
    """How a trainer takes features: the target layers it reads (() the final norm's), whether
    shards are cached under the work folder, the forward and training batch sizes, the epochs
    (for the features' share of a budget), and where its checkpoint lives (a resumed run)."""

    work: Path
    checkpoint_dir: Path
    batch_tokens: int
    feature_batch_tokens: int
    epochs: int
    layers: tuple[int, ...] = ()
    cache: bool = True

    @classmethod
    def of(cls, request: TrainingData, checkpoint_dir: Path, **given: Any) -> FeatureSettings:
        """The settings of a training request (its work folder, batch sizes and epochs)."""
        return cls(
            request.work_dir, checkpoint_dir, request.batch_tokens,
            request.feature_batch_tokens, request.epochs, **given,
        )  # fmt: skip

    def featured(self, target: LoadedModel, samples, name: str, **kwargs) -> list[Featured]:
        """Features of `samples`, in shards WORK/features-NAME (unless `cache` is off)."""
        shards = feature_shards(self.work, name, self.layers) if self.cache else None
        return extract_features(target.model, samples, shards, layers=self.layers, **kwargs)


def collect_features(
    settings: FeatureSettings,
    target: LoadedModel,
    sources: Iterable[Collected],
    names: Sequence[str],
    budget: Budget,
    report: Reporter,
    probe: Prober | None = None,
) -> FeatureSet:
    """Each source's samples as features, in order (`names`: the sources as given, for what
    is said); the held-out part is the first source's that has any. Under a budget (with the
    trainer's `probe`): no source is collected and no forward starts once the features' share
    is spent; a resumed run takes exactly the sequences its checkpoint was trained on."""
    data = FeatureSet()
    plan = saved_plan(settings.checkpoint_dir) if budget.seconds is not None else None
    wanted = plan["sequences"] if plan else None
    until = None
    forward_tokens = settings.feature_batch_tokens
    pending = iter(sources)
    for index in itertools.count():
        if wanted is not None and len(data.train) >= wanted:
            break
        if until is not None and time.monotonic() >= until:
            if index < len(names):
                left = ", ".join(names[index:])
                log(f"the features' share of the time budget is spent: {left} not collected")
            break
        source = _collected(pending, names[index] if index < len(names) else "data", budget)
        if source is None:
            break
        samples = source.samples
        if wanted is not None:
            samples = samples[: wanted - len(data.train)]
        elif budget.seconds is not None and until is None and samples and probe is not None:
            timed = probe(samples, source.held_prompts)
            tokens = sum(len(s.ids) for s in samples)
            log(f"{timed.words(min(settings.batch_tokens, tokens))}; {budget.words()}")
            until, forward_tokens = features_until(
                timed, budget, tokens, settings.batch_tokens, settings.epochs, forward_tokens
            )
            data.tau_prompt_seconds = timed.decode * TAU_TOKENS
        tokens = sum(len(s.ids) for s in samples)
        log(f"{source.name}: {len(samples)} sequences, {tokens} tokens")
        clock = StageClock("features", tokens, budget, until)
        clock.begin_unit("a target forward")  # the unit in progress, named on every line

        def featured(n: int, total: int, made: int, clock: StageClock = clock) -> None:
            clock.advance(made)
            report(clock.progress())

        with Heartbeat(lambda clock=clock: report(clock.progress()), HEARTBEAT_S):
            done = settings.featured(
                target, samples, source.name, batch_tokens=forward_tokens, progress=featured,
                until=None if wanted is not None else until, at_least_one=not data.train,
            )  # fmt: skip
        clock.note = ""  # no forward runs now
        report(clock.progress(), force=True)
        if len(done) < len(samples):
            log(f"{source.name}: features of {len(done)} of {len(samples)} sequences in time")
        kept = sum(len(item.ids) for item in done)
        counts = {"sequences": len(done), "tokens": kept}
        data.mix["by_source"][source.source] = {**counts, **source.mix}
        for kind, count in source.mix.get("kinds", {}).items():
            data.mix["by_kind"][kind] = data.mix["by_kind"].get(kind, 0) + count
        data.train += done
        if source.held and not data.held:
            held = source.held if until is None else held_within(source.held, kept)
            data.held = settings.featured(target, held, "heldout")
            data.held_prompts = source.held_prompts
    return data


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
    data: FeatureSet,
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
