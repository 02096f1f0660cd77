"""The `--data` sources of `specdec train`, read or generated and cached under --work.

Conversations are split once (seeded): 64 are held out for validation; ShareGPT answers come
from conversations 4096..8191 of the rest, prompts for self-distillation from all the others
(first 0..4095, then 8192 onwards), so the two sources never overlap. `magpie` prompts are
written by the target itself (magpie.py), never one of the `exclude` (evaluation) prompts or
the held-out prompts per kind (kinds.py), on whose answers it validates.

Every answer the target generates here comes from `training/datasets.answer_prompts`, cached under
WORK so that a rerun reads it: WORK/SOURCE/chunk-NNNN (`self`, `self-long`), WORK/jsonl,
WORK/self-heldout, WORK/kinds-heldout/KIND, and `magpie`'s job folder WORK/magpie-SEED.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from specdec_core.errors import SpecdecError
from specdec_core.models.loading import LoadedModel
from specdec_core.training import datasets
from specdec_core.training.datasets import HOLDOUT

SHAREGPT = slice(4096, 8192)  # the conversations used as ShareGPT answers
# self-distillation prompt lengths (tokens, chat template included): `self` answers the short
# first prompts; `self-long` the long ones (articles to summarise, code to review), so the head
# also learns to attend over the distances that long-document prompts need
SELF_PROMPTS = {"self": (1, 256), "self-long": (257, 1024)}
FILES = (".jsonl", ".npz")
GENERATED = ("sharegpt", *SELF_PROMPTS, "magpie")  # the sources that are not files


@dataclass(frozen=True)
class Collected:
    """Training samples from one source, and held-out samples / prompts to validate on."""

    source: str  # as the model card records it
    samples: list[datasets.Sample]
    held: list[datasets.Sample] = field(default_factory=list)
    held_prompts: list[list[int]] = field(default_factory=list)
    mix: dict = field(default_factory=dict)  # what the card records beside the counts (kinds)

    @property
    def name(self) -> str:
        """The source's name in cache directories (a file's stem; a job's folder name and the
        size of what was taken, since a job grows between runs)."""
        if "generated" in self.mix:
            tokens = sum(len(s.ids) for s in self.samples)
            return f"job-{Path(self.source).name}-{len(self.samples)}-{tokens}"
        return Path(self.source).stem if self.source.endswith(FILES) else self.source


def check_source(source: str) -> None:
    """Refuse a --data source that names no source or a file that is not there."""
    from specdec_core.training.job_plan import is_job

    if is_job(source):
        return
    if source.endswith(FILES):
        if not Path(source).is_file():
            raise SpecdecError(f"--data {source}: no such file; check the path")
    elif source not in GENERATED:
        raise SpecdecError(
            f"unknown --data '{source}'; use sharegpt, self, self-long, magpie, FILE.jsonl, "
            "FILE.npz or the folder of a `specdec data` job"
        )


def _log(message: str) -> None:
    print(f"[train] {message}", file=sys.stderr, flush=True)


def collect(
    source: str,
    target: LoadedModel,
    tokens: int,
    work: Path,
    max_len: int,
    seed: int,
    cached_only: bool = False,
    exclude: Sequence[str] = (),
) -> Collected:
    """Samples from one source until about `tokens` tokens; plus held-out samples / prompts.
    `exclude`: prompts (evaluation sets) that generated prompts must not match (magpie)."""
    from specdec_core.training.generation_job import load_samples, magpie_samples
    from specdec_core.training.job_plan import is_job

    check_source(source)
    if source.endswith(".jsonl"):
        return Collected(source, _jsonl(source, target, tokens, work, max_len))
    if source.endswith(".npz"):
        answers = trimmed(datasets.load_answers(source), max_len)  # scripts/gpu_distill.py's
        return Collected(source, datasets.until_tokens(answers, tokens))
    if source == "magpie":
        samples, mix = magpie_samples(target, tokens, work, seed, exclude, cached_only)
        return _by_kind(source, trimmed(samples, max_len), mix, target, work)
    if is_job(source):  # what a `specdec data` job generated so far
        samples, generated = load_samples(Path(source), tokens)
        return _by_kind(source, trimmed(samples, max_len), {"generated": generated}, target, work)
    conversations = list(datasets.iter_sharegpt())
    rest, held = datasets.split_conversations(len(conversations), HOLDOUT, seed)
    tok = target.tokenizer
    rendered = (datasets.render_conversation(tok, conversations[i], max_len) for i in held)
    held_samples = [s for s in rendered if s][:16]  # teacher-forced agreement
    held_prompts = [
        p for p in (datasets.first_prompt(tok, conversations[i], 256) for i in held) if p
    ]
    if source == "sharegpt":
        chats = (datasets.render_conversation(tok, conversations[i], max_len)
                 for i in rest[SHAREGPT])  # fmt: skip
        samples = datasets.until_tokens((s for s in chats if s is not None), tokens)
        return Collected(source, samples, held_samples, held_prompts)
    order = rest[: SHAREGPT.start] + rest[SHAREGPT.stop :]
    asked = [conversations[i] for i in order]
    samples = _self_distilled(source, asked, target, tokens, work, cached_only)
    # validate on what the head will see: the target's own answers to held-out prompts
    held_answers = datasets.generate_answers(
        target.model, tok, held_prompts[:32], 128, 32, work / "self-heldout"
    )
    return Collected(source, samples, held_answers or held_samples, held_prompts)


def _by_kind(source: str, samples, mix: dict, target: LoadedModel, work: Path) -> Collected:
    """Generated samples (magpie's or a job's), validated on the held-out prompts of every
    kind, kinds in turn."""
    from specdec_core.training.validation import held_out_by_kind

    held = list(held_out_by_kind(target, work, 3).values())
    held_answers = [s for _, answers in held for s in answers]
    rows = zip(*(prompts for prompts, _ in held), strict=False)  # kinds in turn
    held_prompts = [p for row in rows for p in row]
    return Collected(source, samples, held_answers, held_prompts, mix)


def _self_distilled(
    source: str, conversations, target: LoadedModel, tokens: int, work: Path, cached_only: bool
) -> list[datasets.Sample]:
    """The target's answers to the first prompts of `conversations` whose length `source`
    takes (`SELF_PROMPTS`), in chunks cached under WORK/SOURCE, until `tokens` tokens."""
    chunk = 512
    shortest, longest = SELF_PROMPTS[source]
    samples: list[datasets.Sample] = []
    for number, first in enumerate(range(0, len(conversations), chunk)):
        found = (
            datasets.first_prompt(target.tokenizer, conversation, longest)
            for conversation in conversations[first : first + chunk]
        )
        prompts = [p for p in found if p and len(p) >= shortest]
        if not prompts:
            continue
        samples += datasets.generate_answers(
            target.model, target.tokenizer, prompts, 128, 64, work / source / f"chunk-{number:04d}",
            progress=lambda done: _log(
                f"self-distillation batch {done.number}/{done.calls}: {done.answer_tokens} tokens"
            ),
            budget=tokens - sum(len(s.ids) for s in samples), cached_only=cached_only,
        )  # fmt: skip
        if sum(len(s.ids) for s in samples) >= tokens:
            break
    return samples


def trimmed(samples, max_len: int) -> list[datasets.Sample]:
    """`samples` cut to `max_len` tokens, less those left without an answer token to learn."""
    cut = (datasets.Sample(s.ids[:max_len], s.start) for s in samples)
    return [s for s in cut if len(s.ids) > s.start + 1]


def _jsonl(path: str, target: LoadedModel, tokens: int, work: Path, max_len: int):
    samples, prompts = [], []
    for line in Path(path).read_text().splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        if "text" in record:
            ids = target.tokenizer(record["text"])["input_ids"][:max_len]
            samples.append(datasets.Sample(ids, 0))
        else:
            text = record.get("prompt") or record["turns"][0]
            messages = [{"from": "human", "value": text}]
            prompt = datasets.first_prompt(target.tokenizer, messages, 256)
            if prompt:
                prompts.append(prompt)
    if prompts:
        samples += datasets.generate_answers(
            target.model, target.tokenizer, prompts, 128, 64, work / "jsonl"
        )
    return datasets.until_tokens(samples, tokens)
