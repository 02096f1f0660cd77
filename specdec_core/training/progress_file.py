"""`specdec train --progress-file PATH`: where a training run is, as one small JSON object
written atomically (a reader never sees half of it), so a window or a script can follow it.

{"epoch": 1.4, "step": 14, "steps": 20, "tokens_per_s": 812.0, "eta_s": 7.4,
 "validation": [{"epoch": 1, "step": 10, "teacher_forced_top1": 0.41, "tau": 1.6}, ...],
 "finished": false, "stage": "training", "tokens": 11200, "tokens_total": 16000,
 "budget_left_s": 41.0, "note": "epoch 2, batch 5/10 running 0m12s"}

`validation` is the run's history: one record per epoch (and one where a time budget ended it).
`stage` says what runs (features, then training), with its tokens done of `tokens_total`, the
time left of a budget (null without one) and the unit in progress; it is written as the stage
goes and every few seconds while a unit runs (time_budget.py), so a reader sees progress
inside a batch that takes minutes. `tokens_per_s` and `eta_s` are the stage's.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from specdec_core.files import write_atomic
from specdec_core.training.card import EpochRecord
from specdec_core.training.time_budget import StageProgress

MIN_INTERVAL_S = 0.5  # between writes for plain steps; an epoch's end is always written


@dataclass(frozen=True)
class EpochValidation:
    """Validation after an epoch (or where a time budget ended training)."""

    epoch: float
    teacher_forced_top1: float | None
    tau: float | None


@dataclass(frozen=True)
class TrainProgress:
    """What a progress file says."""

    epoch: float
    step: int
    steps: int
    tokens_per_s: float | None
    eta_s: float | None
    validation: tuple[EpochValidation, ...]
    finished: bool
    stage: str = "training"  # features | training
    tokens: int | None = None  # of the stage, done
    tokens_total: int | None = None
    budget_left_s: float | None = None  # None without a time budget
    note: str = ""  # the unit in progress, e.g. "epoch 1, batch 2/6 running 0m12s"


class ProgressFile:
    """Writes the progress of one run to `path`; `tokens`: training tokens in one epoch."""

    def __init__(self, path: Path, tokens: int) -> None:
        self.path, self.tokens = Path(path), tokens
        self._first: tuple[float, int] | None = None  # (time, step) of this process's first step
        self._written = 0.0
        self._epochs = -1
        self._record: dict = {"epoch": 0.0, "step": 0, "steps": 0, "validation": []}
        self._lock = threading.Lock()

    def stage(self, progress: StageProgress) -> None:
        """Where a stage is (features, training), written at most every `MIN_INTERVAL_S`."""
        now = time.monotonic()
        if now - self._written < MIN_INTERVAL_S:
            return
        self.write(
            {
                **self._record,
                "stage": progress.stage,
                "tokens": progress.done,
                "tokens_total": progress.total,
                "tokens_per_s": round(progress.rate, 1) if progress.rate else None,
                "eta_s": round(progress.eta_s, 1) if progress.eta_s is not None else None,
                "budget_left_s": (
                    round(progress.budget_left_s, 1) if progress.budget_left_s is not None else None
                ),
                "note": progress.note,
                "finished": False,
            }
        )
        self._written = now

    def update(
        self, step: int, steps: int, steps_per_epoch: int, history: Sequence[EpochRecord]
    ) -> None:
        now = time.monotonic()
        if self._first is None:
            self._first = (now, step)
        if len(history) == self._epochs and now - self._written < MIN_INTERVAL_S:
            return
        began, first_step = self._first
        rate = (step - first_step) / (now - began) if now > began and step > first_step else None
        tokens_per_step = self.tokens / max(1, steps_per_epoch)
        self._record.update(
            epoch=round(step / max(1, steps_per_epoch), 3),
            step=step,
            steps=steps,
            validation=[epoch.to_record() for epoch in history],
        )
        self.write(
            {
                **self._record,
                "tokens_per_s": round(rate * tokens_per_step, 1) if rate else None,
                "eta_s": round((steps - step) / rate, 1) if rate else None,
                "finished": False,
                "stage": "training",
                "tokens": round(step * tokens_per_step),
                "tokens_total": round(steps * tokens_per_step),
            }
        )
        self._written, self._epochs = now, len(history)

    def finish(self, history: Sequence[EpochRecord]) -> None:
        """The run has ended and saved its model."""
        try:
            saved = json.loads(self.path.read_text())
        except (OSError, ValueError):
            saved = {}
        validation = [epoch.to_record() for epoch in history]
        self.write({**saved, "eta_s": 0.0, "validation": validation, "finished": True})

    def write(self, record: dict) -> None:
        with self._lock:  # a stage's heartbeat writes from its own thread
            write_atomic(self.path, json.dumps(record))


def read_progress(path: Path) -> TrainProgress | None:
    """The last progress written to `path`, or None when there is none (yet)."""
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return TrainProgress(
        epoch=record.get("epoch", 0.0),
        step=record.get("step", 0),
        steps=record.get("steps", 0),
        tokens_per_s=record.get("tokens_per_s"),
        eta_s=record.get("eta_s"),
        validation=tuple(
            EpochValidation(v["epoch"], v.get("teacher_forced_top1"), v.get("tau"))
            for v in record.get("validation", ())
        ),
        finished=record.get("finished", False),
        stage=record.get("stage", "training"),
        tokens=record.get("tokens"),
        tokens_total=record.get("tokens_total"),
        budget_left_s=record.get("budget_left_s"),
        note=record.get("note", ""),
    )
