"""A generation job's finished batches: one `Shard` each, in WORK/shards/SOURCE/NNNNNN.json.gz.

A shard is written whole (to a temporary name, then renamed) once its batch is answered, and
read back by a resumed job (its progress and its filter's memory), by `load_samples` and by
`--data magpie`. The file is the record's fields as gzipped JSON; shards written before
`write_seconds` existed read it as 0.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from specdec_core.files import write_atomic


@dataclass(frozen=True)
class Written:
    """A user turn the target wrote (magpie): its kind, hint and text (None: unfinished)."""

    kind: str
    hint: int
    text: str | None


@dataclass(frozen=True)
class Answered:
    """One answered user turn: prompt (history included) + answer ids; loss from `start`."""

    ids: list[int]
    start: int
    kind: str


@dataclass(frozen=True)
class Shard:
    """One finished batch of a source."""

    source: str
    batch: int  # its number in the source's stream
    candidates: int  # requests drawn from the stream (fewer than a batch: it ran out)
    exhausted: bool
    written: list[Written]  # magpie: the turns the target wrote for this batch
    rejected: dict[str, int]  # what the prompt filter dropped, per reason
    seconds: float  # the batch's time, writing and answering
    samples: list[Answered]
    write_seconds: float = 0.0  # magpie: of `seconds`, the target writing its prompts

    def write(self, work: Path) -> None:
        data = json.dumps(asdict(self)).encode()
        write_atomic(shard_path(work, self.source, self.batch), gzip.compress(data))

    @classmethod
    def read(cls, path: Path) -> Shard:
        saved = json.loads(gzip.decompress(path.read_bytes()))
        saved["written"] = [Written(**w) for w in saved["written"]]
        saved["samples"] = [Answered(**s) for s in saved["samples"]]
        return cls(**saved)


def shard_path(work: Path, source: str, number: int) -> Path:
    return work / "shards" / source / f"{number:06d}.json.gz"


def read_shards(work: Path, source: str) -> Iterator[Shard]:
    """The finished batches of `source`, in order (stops at the first missing number)."""
    number = 0
    while (path := shard_path(work, source, number)).is_file():
        yield Shard.read(path)
        number += 1
