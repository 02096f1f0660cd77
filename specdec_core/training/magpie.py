"""`--data magpie`: prompts the target writes itself, for every kind of request, then answers.

The Magpie trick (Xu et al. 2024, "Magpie: Alignment Data Synthesis from Scratch by Prompting
Aligned LLMs with Nothing"): an instruction-tuned model given only its chat template up to and
including the user role header writes a plausible user turn. Here a system prompt per kind
(`kinds.HINTS`: writing, coding, maths, extraction, role-play, summarisation, QA) steers what
it writes; it samples at temperature 1 until its end-of-turn token (`user_turn_opening`,
`sampled_turns`), a batch of turns at a time until `ENOUGH` of them have ended. The prompts
are then filtered (`PromptFilter`): empty, too short, too long or unfinished ones are
dropped, so are exact duplicates (after `normalise`) and near-duplicates
(`NEAR` of the word 3-grams of the shorter one shared, `overlap`), and so is any prompt that
matches or nearly matches an evaluation prompt (the caller's `exclude` texts, e.g. every
benchmark prompt file, and `kinds.HELD_OUT`). The survivors are answered greedily. Writing,
filtering and answering are the generation job's (generation_job.py): `specdec data` runs it
over every source, `--data magpie` over this one alone (`generation_job.magpie_samples`).
"""

from __future__ import annotations

import glob
import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from specdec_core.errors import SpecdecError
from specdec_core.models.loading import LoadedModel
from specdec_core.training import datasets
from specdec_core.training.kinds import HINTS, KINDS

MARK = "\x00specdec-user-turn\x00"  # where the user's text would start in the template
TURN_TOKENS = 128  # the longest user turn the target writes; longer ones are dropped
PROMPT_TOKENS = 256  # the longest prompt (chat template included) answered
# writing ends once this share of the user turns has ended: the few still going would run to
# TURN_TOKENS, mostly to be dropped unfinished, at the cost of every row's steps
ENOUGH = 0.9
NEAR = 0.8  # share of the shorter prompt's word 3-grams found in the other: a near-duplicate
MIN_WORDS, MAX_WORDS = 4, 300
SHINGLE = 3


@dataclass(frozen=True)
class Opening:
    """The template up to the user's text, under one hint of one kind."""

    kind: str
    hint: int  # index into HINTS[kind]
    ids: tuple[int, ...]


Writer = Callable[[list[Opening], int], list[tuple[Opening, "str | None"]]]


# -- filtering (pure) ---------------------------------------------------------------------------
def normalise(text: str) -> str:
    """Lower case, letters and digits only, single spaces: what counts as the same prompt."""
    return " ".join(re.sub(r"[^\w]+", " ", text.lower()).split())


def shingles(text: str, n: int = SHINGLE) -> frozenset[str]:
    """The word n-grams of the normalised text (the whole text if it is shorter)."""
    words = normalise(text).split()
    if len(words) <= n:
        return frozenset([" ".join(words)]) if words else frozenset()
    return frozenset(" ".join(words[i : i + n]) for i in range(len(words) - n + 1))


class PromptFilter:
    """Keeps a prompt unless it is empty, too short / long, unfinished, a (near-)duplicate of
    one kept before, or a (near-)match of an excluded (evaluation) prompt; `rejected` counts
    the reasons."""

    def __init__(
        self,
        exclude: Iterable[str] = (),
        near: float = NEAR,
        min_words: int = MIN_WORDS,
        max_words: int = MAX_WORDS,
    ) -> None:
        self.near, self.min_words, self.max_words = near, min_words, max_words
        self.rejected: Counter[str] = Counter()
        self._exact: dict[str, bool] = {}  # normalised text -> excluded
        self._sets: list[tuple[frozenset[str], bool]] = []  # n-grams, excluded
        self._index: dict[str, list[int]] = {}  # n-gram -> entries holding it
        for text in exclude:
            self._add(text, excluded=True)

    def copy(self, max_words: int) -> PromptFilter:
        """A filter that excludes what this one excludes and remembers what it remembers, for
        prompts of up to `max_words` words (building the exclusions once serves every source
        of a job)."""
        twin = PromptFilter((), self.near, self.min_words, max_words)
        twin._exact, twin._sets = dict(self._exact), list(self._sets)
        twin._index = {gram: list(entries) for gram, entries in self._index.items()}
        return twin

    def reason(self, text: str | None) -> str | None:
        """Why `text` would be dropped (None: it would be kept)."""
        if text is None:
            return "unfinished"
        norm = normalise(text)
        words = len(norm.split())
        if not words:
            return "empty"
        if words < self.min_words:
            return "short"
        if words > self.max_words:
            return "long"
        matches = {self._exact[norm]} if norm in self._exact else set()
        grams = shingles(text)
        shared = Counter(e for g in grams for e in self._index.get(g, ()))
        for entry, count in shared.items():
            entry_grams, excluded = self._sets[entry]
            if count / min(len(grams), len(entry_grams)) >= self.near:
                matches.add(excluded)
        if True in matches:
            return "evaluation"
        return "duplicate" if matches else None

    def keep(self, text: str | None) -> bool:
        """Keep `text` (and remember it) or count why not."""
        why = self.reason(text)
        if why is not None:
            self.rejected[why] += 1
            return False
        self._add(text, excluded=False)
        return True

    def _add(self, text: str, excluded: bool) -> None:
        grams = shingles(text)
        if not grams:
            return
        self._exact.setdefault(normalise(text), excluded)
        self._sets.append((grams, excluded))
        for gram in grams:
            self._index.setdefault(gram, []).append(len(self._sets) - 1)


def filter_prompts(texts: Iterable[str | None], exclude: Iterable[str] = ()) -> list[str]:
    """`texts` without the ones `PromptFilter` drops, in order."""
    gate = PromptFilter(exclude)
    return [text for text in texts if gate.keep(text)]


def evaluation_prompts(patterns: Sequence[str]) -> list[str]:
    """Every prompt (every turn) of the JSONL files matching `patterns` (paths or globs)."""
    texts: list[str] = []
    for path in prompt_files(patterns):
        for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                turns = [record["prompt"]] if "prompt" in record else list(record["turns"])
            except (json.JSONDecodeError, KeyError, TypeError):
                raise SpecdecError(
                    f"{path}:{number}: expected a JSON object with 'prompt' or 'turns'"
                ) from None
            texts += [t for t in turns if isinstance(t, str)]
    return texts


def bundled_evaluation_prompts() -> list[str]:
    """Every prompt of the evaluation sets shipped in resources/evaluation (MT-bench and the
    Spec-Bench-style sets): no generated training data may hold one."""
    from specdec_core.resources import resource_path

    return evaluation_prompts(sorted(str(p) for p in resource_path("evaluation").glob("*.jsonl")))


def prompt_files(patterns: Sequence[str]) -> list[str]:
    """The files `patterns` name; refuses a pattern that matches none."""
    files: list[str] = []
    for pattern in patterns:
        found = sorted(glob.glob(str(Path(pattern).expanduser())))
        if not found:
            raise SpecdecError(f"--exclude-prompts {pattern}: no such file; check the path")
        files += found
    return files


# -- generation ---------------------------------------------------------------------------------
def user_turn_opening(tokenizer, system: str) -> list[int]:
    """The chat template rendered with `system` up to and including the user role header."""
    if not getattr(tokenizer, "chat_template", None):
        raise SpecdecError(
            "--data magpie needs an instruction-tuned target with a chat template; this one "
            "has none (use --data self or a JSONL file)"
        )
    messages = [{"role": "system", "content": system}, {"role": "user", "content": MARK}]
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    if MARK not in text:
        raise SpecdecError("the chat template drops the user's text; --data magpie cannot use it")
    return list(tokenizer(text[: text.index(MARK)], add_special_tokens=False)["input_ids"])


def openings(tokenizer) -> list[Opening]:
    """One opening per hint of every kind."""
    return [
        Opening(kind, number, tuple(user_turn_opening(tokenizer, hint)))
        for kind in KINDS
        for number, hint in enumerate(HINTS[kind])
    ]


def sampled_turns(target: LoadedModel) -> Writer:
    """The default writer: the target samples the openings' user turns at temperature 1 in one
    call, seeded, until `ENOUGH` of them have ended; a turn cut off comes back as None."""
    tok, eos = target.tokenizer, set(target.eos_ids)
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0

    def write(asked: list[Opening], seed: int) -> list[tuple[Opening, str | None]]:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            turns = datasets.answer_batch(
                target.model, [list(o.ids) for o in asked], TURN_TOKENS, pad, eos,
                temperature=1.0, enough=ENOUGH,
            )  # fmt: skip
        ended = [bool(turn) and turn[-1] in eos for turn, _ in turns]  # else cut off: None
        texts = [tok.decode(turn, skip_special_tokens=True).strip() for turn, _ in turns]
        return [(o, t if end else None) for o, t, end in zip(asked, texts, ended, strict=True)]

    return write
