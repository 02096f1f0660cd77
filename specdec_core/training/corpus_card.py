"""A generation job's card (`WORK/card.json`): what a corpus of the target's answers holds.

A job writes it after every shard, so a folder kept in a repository (resources/corpus/) says
what it is without loading a model: the target and the SHA-256 of its weights files, how the
answers were made (greedy or sampled, dtype, machine, seconds), the prompt sources and kinds
with their answer tokens, what the prompt filter dropped (evaluation prompts among it), and
every shard with its checksum. `check` reads the shards back against the card.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from specdec_core.decoding.config import is_greedy
from specdec_core.errors import SpecdecError
from specdec_core.files import write_atomic
from specdec_core.training.job_plan import JobPlan
from specdec_core.training.job_shards import Shard, checksum, shard_files
from specdec_core.training.magpie import NEAR, shingles

CARD_FILE = "card.json"
WEIGHT_SUFFIXES = (".safetensors", ".gguf", ".bin", ".pt")


@dataclass
class Tally:
    """Batches, samples, answer tokens and seconds of one part of the corpus."""

    batches: int = 0
    samples: int = 0
    answer_tokens: int = 0
    seconds: float = 0.0

    def add(self, shard: Shard) -> None:
        self.batches += 1
        self.samples += len(shard.samples)
        self.answer_tokens += shard.answer_tokens
        self.seconds = round(self.seconds + shard.seconds, 3)


@dataclass
class CorpusCard:
    """The card as a job holds it; `add` counts a finished shard in."""

    target: str
    weights_sha256: str
    max_new_tokens: int
    sample_every: int
    mix: dict[str, float]
    exclude: list[str]  # the job's own evaluation files (patterns, relative to its folder)
    evaluation_sets: list[str]  # the bundled ones (resources/evaluation), always excluded
    answer_tokens: int = 0
    prompt_tokens: int = 0
    samples: int = 0
    generation_seconds: float = 0.0
    sources: dict[str, Tally] = field(default_factory=dict)
    kinds: dict[str, int] = field(default_factory=dict)  # answer tokens per kind
    answering: dict[str, int] = field(default_factory=dict)  # answer tokens: greedy / T = 1
    dtypes: dict[str, int] = field(default_factory=dict)  # answer tokens per dtype
    machines: dict[str, Tally] = field(default_factory=dict)
    rejected: dict[str, int] = field(default_factory=dict)  # prompts dropped, per reason
    shards: list[dict] = field(default_factory=list)  # file, sha256, answer tokens

    @classmethod
    def new(cls, plan: JobPlan, weights_sha256: str, evaluation_sets: list[str]) -> CorpusCard:
        return cls(
            target=plan.target,
            weights_sha256=weights_sha256,
            max_new_tokens=plan.max_new_tokens,
            sample_every=plan.sample_every,
            mix=dict(plan.mix),
            exclude=list(plan.exclude),
            evaluation_sets=evaluation_sets,
        )

    def add(self, shard: Shard, path: Path, work: Path) -> None:
        made = shard.answer_tokens
        self.answer_tokens += made
        self.prompt_tokens += sum(s.start for s in shard.samples)
        self.samples += len(shard.samples)
        self.generation_seconds = round(self.generation_seconds + shard.seconds, 3)
        self.sources.setdefault(shard.source, Tally()).add(shard)
        kinds = Counter(self.kinds)
        for sample in shard.samples:
            kinds[sample.kind] += len(sample.ids) - sample.start
        self.kinds = dict(sorted(kinds.items()))
        how = shard.answering
        mode = "greedy" if is_greedy(how.temperature) else f"T={how.temperature:g}"
        self.answering[mode] = self.answering.get(mode, 0) + made
        dtype = how.dtype or "unrecorded"
        self.dtypes[dtype] = self.dtypes.get(dtype, 0) + made
        self.machines.setdefault(how.machine or "unrecorded", Tally()).add(shard)
        self.rejected = dict(sorted((Counter(self.rejected) + Counter(shard.rejected)).items()))
        self.shards.append(
            {
                "file": path.relative_to(work).as_posix(),
                "sha256": checksum(path),
                "answer_tokens": made,
            }
        )

    def write(self, work: Path) -> None:
        record = asdict(self)
        record["shards"] = sorted(self.shards, key=lambda s: s["file"])
        write_atomic(work / CARD_FILE, json.dumps(record, indent=1).encode())


def read_corpus_card(work: Path) -> dict:
    """The card of the job in WORK as its JSON record."""
    path = work / CARD_FILE
    if not path.is_file():
        raise SpecdecError(f"{work} has no {CARD_FILE}; run `specdec data run --work {work}`")
    return json.loads(path.read_text())


def check(work: Path) -> dict:
    """Every shard under WORK against the card: the same files, each with its checksum, and the
    card's totals those of the shards; -> the card. Raises naming the first that differs."""
    card = read_corpus_card(work)
    listed = {s["file"]: s for s in card["shards"]}
    found = {p.relative_to(work).as_posix(): p for p in shard_files(work)}
    if set(listed) != set(found):
        extra = sorted(set(found) - set(listed)) or sorted(set(listed) - set(found))
        raise SpecdecError(
            f"{work}: the card and the shards differ ({extra[0]}); resume the job "
            "(`specdec data run`), which rewrites the card from the shards"
        )
    tokens = 0
    for name, path in found.items():
        shard = Shard.read(path)  # verifies the shard's own checksum
        if checksum(path) != listed[name]["sha256"]:
            raise SpecdecError(f"{path}: not the shard the card lists (its SHA-256 differs)")
        tokens += shard.answer_tokens
    if tokens != card["answer_tokens"]:
        raise SpecdecError(f"{work}: the shards hold {tokens} answer tokens, the card says "
                           f"{card['answer_tokens']}")  # fmt: skip
    return card


def weights_sha256(source: str) -> str:
    """The SHA-256 of a model's weights files (a file, or a folder's weight files in name
    order), read in 1 MiB blocks."""
    root = Path(source)
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*")
                                                 if p.suffix in WEIGHT_SUFFIXES)  # fmt: skip
    digest = hashlib.sha256()
    for path in files:
        with open(path, "rb") as handle:
            while block := handle.read(1 << 20):
                digest.update(block)
    return digest.hexdigest()


def contaminated(prompts: Iterable[str], evaluation: Iterable[str], near: float = NEAR) -> list:
    """The (prompt number, evaluation prompt) pairs where an evaluation prompt appears, whole or
    nearly, in a training prompt: at least `near` of its word 3-grams are in that prompt (the
    prompt filter's rule for a near match, seen from the evaluation prompt)."""
    wanted = [(text, shingles(text)) for text in evaluation]
    index: dict[str, list[int]] = {}
    for number, (_, grams) in enumerate(wanted):
        for gram in grams:
            index.setdefault(gram, []).append(number)
    found = []
    for number, prompt in enumerate(prompts):
        shared = Counter(e for gram in shingles(prompt) for e in index.get(gram, ()))
        found += [(number, wanted[e][0]) for e, count in shared.items()
                  if count >= near * len(wanted[e][1])]  # fmt: skip
    return found
