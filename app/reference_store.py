"""Autoregressive references kept between Generates and between starts, on this machine.

An autoregressive reference of a prompt is the same run whatever method it is a reference for:
`ar` ignores k, trees, heads and policies, and at T = 0 its output is the target's greedy
output, which a lossless run reproduces token for token (at T > 0 the seed fixes it the same
way). What makes two references comparable is the key (`reference_key`): the machine (its CPU
model and core count), the target (spec, device, dtype), the prompt (with the chat history of a
chat turn, and whether it is raw) and the settings `ar` reads (max new tokens, temperature,
top-p, seed). A measured reference is kept as a `KeptReference`: its new tokens, wall time and
timed steps, the tokens it gave and when it was measured; in memory and in the user data dir
beside the run history (`references.json`, `SPECDEC_DATA_DIR` where set; the newest `KEEP`
references), so a second start of the window reuses them.

A kept reference was timed under the conditions of its day. Before it is trusted again, a few
of its steps are timed now (`CHECK_STEPS`: the same prompt and settings, `ar`, that many new
tokens, off the critical path, after the answer): where their median step lies within
`CHECK_FIT` of the same steps' kept median the reference is used as it is; where the machine
now runs them faster or slower (another job, a frequency change, another power plan) every kept
step is scaled by that factor (`KeptReference.scaled`): a re-timed reference, which costs
`CHECK_STEPS` steps instead of a whole run. Qt-free, tested without a window.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from platformdirs import user_data_dir

from app.engine_api import RunRequest, TargetInfo
from specdec_core.decoding.events import RunSummary
from specdec_core.environment import cpu_model
from specdec_core.files import write_atomic
from specdec_core.measurement.run_speedup import StepTime

STORE_FILE = "references.json"
KEEP = 256  # references kept in the file, newest first out last
CHECK_STEPS = 8  # steps of a kept reference timed again before it is used
CHECK_FIT = 0.25  # kept as it is when the checked steps are within 25 % of their kept time


def machine() -> str:
    """This machine as it changes an autoregressive run's speed: its CPU and cores."""
    return f"{cpu_model()} | {os.cpu_count()} cores"


def reference_key(request: RunRequest, target: TargetInfo) -> str:
    """What makes two autoregressive references of `request` comparable, as one string."""
    config = request.config
    parts = {
        "machine": machine(),
        "target": [target.spec, target.device, target.dtype],
        "prompt": request.prompt,
        "raw": request.raw,
        "messages": [[m.role, m.content] for m in request.messages],
        "settings": [config.max_new_tokens, config.temperature, config.top_p, config.seed],
    }
    text = json.dumps(parts, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class KeptReference:
    """A measured autoregressive reference: what its speedups need, and when it was timed."""

    new_tokens: int
    wall_seconds: float
    steps: tuple[StepTime, ...]
    measured: float  # time.time() when it was measured
    token_ids: tuple[int, ...] = ()

    @classmethod
    def of(cls, summary: RunSummary, steps: Sequence[StepTime]) -> KeptReference:
        return cls(
            summary.new_tokens, summary.wall_seconds, tuple(steps), time.time(), summary.token_ids
        )

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.wall_seconds if self.wall_seconds > 0 else 0.0

    def scaled(self, factor: float) -> KeptReference:
        """The same reference with every second times `factor` (a re-timed reference)."""
        steps = tuple(StepTime(s.tokens, s.seconds * factor) for s in self.steps)
        return replace(self, wall_seconds=self.wall_seconds * factor, steps=steps)

    def pace(self, check: Sequence[StepTime]) -> float | None:
        """How much slower (> 1) or faster (< 1) the machine ran `check`, the first steps of
        the same reference timed now, than this reference ran the same steps: the ratio of
        their median seconds a step (a step stalled by another job moves a median little);
        None without timed steps on both sides."""
        count = min(len(check), len(self.steps))
        if not count:
            return None
        now = statistics.median(s.seconds for s in check[:count])
        then = statistics.median(s.seconds for s in self.steps[:count])
        return now / then if now > 0 and then > 0 else None

    def to_record(self) -> dict:
        return {
            "new_tokens": self.new_tokens,
            "wall_seconds": self.wall_seconds,
            "steps": [[s.tokens, s.seconds] for s in self.steps],
            "measured": self.measured,
            "token_ids": list(self.token_ids),
        }

    @classmethod
    def from_record(cls, record: dict) -> KeptReference:
        steps = tuple(StepTime(int(t), float(s)) for t, s in record["steps"])
        ids = tuple(int(i) for i in record.get("token_ids", ()))
        return cls(
            int(record["new_tokens"]), float(record["wall_seconds"]), steps,
            float(record["measured"]), ids,
        )  # fmt: skip


def fits(pace: float, tolerance: float = CHECK_FIT) -> bool:
    """Does a kept reference still hold at this pace (its checked steps within tolerance)?"""
    return abs(pace - 1.0) <= tolerance


def store_path() -> Path:
    """`references.json` in the user data dir, beside the run history."""
    root = os.environ.get("SPECDEC_DATA_DIR") or user_data_dir("specdec-playground")
    return Path(root) / STORE_FILE


class ReferenceStore:
    """Kept references by key: in memory, and in `path` (None: in memory only)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._kept: dict[str, KeptReference] | None = None  # read from the file at first use

    @classmethod
    def default(cls) -> ReferenceStore:
        return cls(store_path())

    def _all(self) -> dict[str, KeptReference]:
        if self._kept is None:
            self._kept = self._read()
        return self._kept

    def _read(self) -> dict[str, KeptReference]:
        if self.path is None:
            return {}
        try:
            saved = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            return {}  # none yet, or unreadable: measured again and rewritten
        kept = {}
        for key, record in saved.items() if isinstance(saved, dict) else ():
            with contextlib.suppress(KeyError, TypeError, ValueError):
                kept[key] = KeptReference.from_record(record)
        return kept

    def get(self, key: str) -> KeptReference | None:
        return self._all().get(key)

    def put(self, key: str, reference: KeptReference) -> None:
        kept = self._all()
        kept.pop(key, None)
        kept[key] = reference
        self._kept = dict(list(kept.items())[-KEEP:])
        self._write()

    def drop(self, key: str) -> None:
        if self._all().pop(key, None) is not None:
            self._write()

    def _write(self) -> None:
        if self._kept is None or self.path is None:
            return
        records = {k: r.to_record() for k, r in self._kept.items()}
        with contextlib.suppress(OSError):  # a read-only cache dir: kept for this start only
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(self.path, json.dumps(records).encode())
