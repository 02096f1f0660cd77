"""A generation job's finished batches: one `Shard` each, in WORK/shards/SOURCE/NNNNNN.shard.

A shard is written whole (to a temporary name, then renamed) once its batch is answered, and
read back by a resumed job (its progress and its filter's memory), by `load_samples`, by
`--data magpie` and by the corpus card (corpus_card.py). It is small enough to keep in a
repository (resources/corpus/ holds the embedded model's corpus this way):

    b"specdec-shard 1\\n"  32 bytes: SHA-256 of the body  body: xz(meta JSON, b"\\0", ids)

`meta` holds the record's fields with each sample's length instead of its ids; `ids` are every
sample's token ids one after another, in the smallest unsigned integer type that holds them
(uint16 for a vocabulary of up to 65,536). The checksum is verified on every read, so a damaged
or half-copied shard is refused by name instead of read as other tokens. Shards of the first
format (`NNNNNN.json.gz`, gzipped JSON) still read.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import lzma
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from specdec_core.errors import SpecdecError
from specdec_core.files import write_atomic

MAGIC = b"specdec-shard 1\n"
SUFFIX = ".shard"
_LEGACY_SUFFIX = ".json.gz"
_UNSIGNED = (np.uint8, np.uint16, np.uint32, np.uint64)


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
class Answering:
    """How a batch was answered: greedy (`temperature` 0) or sampled, in which dtype, where."""

    temperature: float = 0.0
    dtype: str = ""
    machine: str = ""


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
    answering: Answering = field(default_factory=Answering)

    @property
    def answer_tokens(self) -> int:
        return sum(len(s.ids) - s.start for s in self.samples)

    def write(self, work: Path) -> Path:
        """Write the shard under WORK (all of it or nothing); -> its path."""
        path = work / "shards" / self.source / f"{self.batch:06d}{SUFFIX}"
        write_atomic(path, self.to_bytes())
        return path

    def to_bytes(self) -> bytes:
        ids = [i for sample in self.samples for i in sample.ids]
        kind = next(t for t in _UNSIGNED if max(ids, default=0) <= np.iinfo(t).max)
        meta = asdict(replace(self, samples=[]))
        meta["samples"] = [[len(s.ids), s.start, s.kind] for s in self.samples]
        meta["dtype"] = np.dtype(kind).name
        payload = json.dumps(meta).encode() + b"\0" + np.asarray(ids, dtype=kind).tobytes()
        body = lzma.compress(payload)  # preset 6: as small as 9 for token ids, 30 ms faster
        return MAGIC + hashlib.sha256(body).digest() + body

    @classmethod
    def read(cls, path: Path) -> Shard:
        data = path.read_bytes()
        if path.name.endswith(_LEGACY_SUFFIX):
            return cls._from_meta(json.loads(gzip.decompress(data)), None)
        digest, body = data[len(MAGIC) : len(MAGIC) + 32], data[len(MAGIC) + 32 :]
        if not data.startswith(MAGIC) or hashlib.sha256(body).digest() != digest:
            raise SpecdecError(
                f"{path}: damaged shard (its checksum does not match); delete it and resume "
                "the job, which answers that batch again"
            )
        meta_bytes, _, id_bytes = lzma.decompress(body).partition(b"\0")
        meta = json.loads(meta_bytes)
        return cls._from_meta(meta, np.frombuffer(id_bytes, dtype=meta.pop("dtype")).tolist())

    @classmethod
    def _from_meta(cls, saved: dict, ids: list[int] | None) -> Shard:
        """The record from its fields; `ids`: every sample's ids in a row (None: each sample
        holds its own, the first format)."""
        saved["written"] = [Written(**w) for w in saved["written"]]
        saved["answering"] = Answering(**saved.get("answering", {}))
        if ids is None:
            saved["samples"] = [Answered(**s) for s in saved["samples"]]
            return cls(**saved)
        samples, at = [], 0
        for length, start, kind in saved["samples"]:
            samples.append(Answered(ids[at : at + length], start, kind))
            at += length
        saved["samples"] = samples
        return cls(**saved)


def checksum(path: Path) -> str:
    """The SHA-256 of a shard file (hex), as the corpus card lists it."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def shard_path(work: Path, source: str, number: int) -> Path:
    """Where batch `number` of `source` is (a first-format shard where that one is there)."""
    legacy = work / "shards" / source / f"{number:06d}{_LEGACY_SUFFIX}"
    return legacy if legacy.is_file() else work / "shards" / source / f"{number:06d}{SUFFIX}"


def read_shards(work: Path, source: str) -> Iterator[Shard]:
    """The finished batches of `source`, in order (stops at the first missing number)."""
    number = 0
    while (path := shard_path(work, source, number)).is_file():
        yield Shard.read(path)
        number += 1


def shard_files(work: Path) -> list[Path]:
    """Every shard file under WORK, by source and number."""
    folder = work / "shards"
    found = [*folder.glob(f"*/*{SUFFIX}"), *folder.glob(f"*/*{_LEGACY_SUFFIX}")]
    return sorted(found, key=lambda p: (p.parent.name, p.name))
