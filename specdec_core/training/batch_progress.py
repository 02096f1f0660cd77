"""The batch a generation job is making, as its status.json says it while the batch runs.

A job writes a batch's shard only once the batch has ended, so without this a reader would
see nothing move for as long as a batch takes (at a small budget a batch can be one answer
of hundreds of tokens). While a batch runs, status.json carries it under `batch`:

{"source": "magpie", "number": 0, "phase": "answering", "answers": 2, "answer_tokens": 312,
 "seconds": 14.2}

`number` is its shard's (0 for a source's first batch); `phase` is `requests` while its
requests are drawn (magpie's user turns are written by the target then) and `answering` once
the target answers them; `answers` counts the answered turns so far, `answer_tokens` the
answer tokens generated so far, counted token step by token step as generation goes (every
step adds the rows still generating; the count is exact at each call's end); `seconds` runs
from the batch's start. Without a batch running (or in a status.json written before this
record existed) `batch` is null or absent. `specdec data status` and the Train tab both say
it in `words()`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class BatchInProgress:
    """The batch a job is making: see the module's docstring for each field."""

    source: str
    number: int
    phase: str = "requests"
    answers: int = 0
    answer_tokens: int = 0
    seconds: float = 0.0

    @property
    def tokens_per_s(self) -> float | None:
        """Answer tokens/s since the batch began (None before its first token)."""
        if self.answer_tokens and self.seconds > 0:
            return self.answer_tokens / self.seconds
        return None

    def to_record(self) -> dict:
        return asdict(self)

    @classmethod
    def from_record(cls, record: dict | None) -> BatchInProgress | None:
        """The record status.json's `batch` holds (None: no batch running)."""
        if record is None:
            return None
        return cls(
            source=record["source"],
            number=int(record["number"]),
            phase=record["phase"],
            answers=int(record["answers"]),
            answer_tokens=int(record["answer_tokens"]),
            seconds=float(record["seconds"]),
        )

    def words(self) -> str:
        """'312 answer tokens so far in batch 1 (magpie), 2 answers finished', or what the batch
        does before its first answer token."""
        where = f"batch {self.number + 1} ({self.source})"
        if self.phase == "requests":
            return f"{where} is preparing its requests"
        if not self.answer_tokens:
            return f"{where} is answering, no answer token yet"
        line = f"{self.answer_tokens:,} answer tokens so far in {where}"
        if self.answers:
            line += f", {self.answers:,} answer{'s' if self.answers != 1 else ''} finished"
        return line
