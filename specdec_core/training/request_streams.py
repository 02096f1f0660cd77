"""The requests a generation job answers, one deterministic stream per source.

A `Request` is the user's side of a chat: one or more user turns and the kind it stands for.
The target answers each turn in order, its own earlier answers kept in the history (as in a
chat), and each answered turn becomes a training sample.

ShareGPT conversations (`conversations`) are split as `specdec train` splits them (the same
`HOLDOUT` conversations are never used), then each is classified once, in order, so no two
sources share a conversation's prompt:

- `code`: a first user turn that asks about or contains code;
- `long`: a first user turn of `LONG_CHARS` characters or more (articles to summarise, logs,
  papers), and, from every `ARTICLE_EVERY`-th other conversation whose first answer is a
  long piece of prose, a summarisation or extraction request written around that text;
- `sharegpt-later`: every other conversation with a second user turn: both turns, the second
  answered with the target's answer to the first in context;
- `sharegpt-first`: the first user turn of the rest.

`magpie` requests are written by the target itself (magpie.py), batch n with seed
`seed`·1000003 + n. Every stream (`RequestStream`) is a pure function of the conversations (or
the target) and the seed: candidate number i is the same in every run, which is what makes a
job resumable batch by batch.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Protocol

from specdec_core.training import datasets, magpie
from specdec_core.training.datasets import HOLDOUT
from specdec_core.training.job_shards import Shard, Written

LONG_CHARS = 1200  # a first turn this long (about 300 tokens) is a long-context request
ARTICLE_WORDS = (150, 700)  # a first answer of this many words is an article to summarise
ARTICLE_EVERY = 3
MAX_PROMPT_TOKENS = 1024  # a longer request (history included) is dropped as "long"
MAX_WORDS = 2000  # words of one request before its tokens are counted
CODE = re.compile(
    r"```|\bdef \w+\(|\bfunction\b|#include|\bclass \w+|console\.log|\bSELECT\b.+\bFROM\b|"
    r"\bimport \w+|\bpublic static\b|\bpython\b|\bjavascript\b|\btypescript\b|\bSQL\b|\bregex\b|"
    r"\bcode\b|\bscript\b|\bprogram\b|\bbash\b|\bjava\b|\bc\+\+|\bhtml\b|\bcss\b|\bapi\b|"
    r"\breact\b|\bfunction\(|=>",
    re.IGNORECASE,
)
ARTICLE_TASKS: tuple[tuple[str, str], ...] = (
    ("summarisation", "Summarise the following text in three sentences.\n\n{text}"),
    ("summarisation", "{text}\n\nGive me the main points of the text above as a bullet list."),
    ("summarisation", "Write a one-paragraph summary of this:\n\n{text}"),
    ("summarisation", "TL;DR of the following, for a busy reader:\n\n{text}"),
    ("extraction", "List every name, date, number and place mentioned in this text:\n\n{text}"),
    ("extraction", "{text}\n\nExtract the key facts from the text above as JSON."),
    ("extraction", "Read this and answer: what are the three most important claims?\n\n{text}"),
    ("extraction", "Turn the following into a table of its items and details:\n\n{text}"),
)


@dataclass(frozen=True)
class Request:
    """User turns to answer in order (the target's answers in between), and their kind."""

    kind: str
    turns: tuple[str, ...]


def user_and_answers(conversation: Sequence[dict]) -> tuple[list[str], list[str]]:
    """The user turns and the answers of a ShareGPT conversation, in order."""
    users, answers = [], []
    for turn in conversation:
        role, text = datasets.role_of(turn), turn.get("value") or ""
        if role == "user" and text.strip():
            users.append(text.strip())
        elif role == "assistant" and text.strip():
            answers.append(text.strip())
    return users, answers


def mostly_latin(text: str) -> bool:
    """Most letters are ASCII: a request the (English) targets this is made for answer well."""
    letters = [c for c in text if c.isalpha()]
    return bool(letters) and sum(c.isascii() for c in letters) >= 0.8 * len(letters)


def classify(conversation: Sequence[dict], position: int) -> list[tuple[str, Request]]:
    """The (source, request) pairs conversation number `position` (of the usable ones) gives."""
    users, answers = user_and_answers(conversation)
    if not users or not mostly_latin(users[0]):
        return []
    first = users[0]
    if CODE.search(first):
        return [("code", Request("coding", (first,)))]
    if len(first) >= LONG_CHARS:
        return [("long", Request("long-chat", (first,)))]
    found: list[tuple[str, Request]] = []
    if len(users) >= 2 and position % 2 == 0 and mostly_latin(users[1]):
        found.append(("sharegpt-later", Request("chat", (first, users[1]))))
    else:
        found.append(("sharegpt-first", Request("chat", (first,))))
    article = answers[0] if answers else ""
    words = len(article.split())
    if (
        position % ARTICLE_EVERY == 1
        and ARTICLE_WORDS[0] <= words <= ARTICLE_WORDS[1]
        and not CODE.search(article)
        and mostly_latin(article)
    ):
        kind, task = ARTICLE_TASKS[(position // ARTICLE_EVERY) % len(ARTICLE_TASKS)]
        found.append(("long", Request(kind, (task.format(text=article),))))
    return found


def conversation_requests(
    conversations: Sequence[Sequence[dict]], source: str, seed: int
) -> Iterator[Request]:
    """The requests of `source` ('sharegpt-first', 'sharegpt-later', 'long' or 'code'), in
    their fixed order, the held-out conversations of `specdec train` (same seed) left out."""
    rest, _ = datasets.split_conversations(len(conversations), HOLDOUT, seed)
    for position, index in enumerate(rest):
        for found, request in classify(conversations[index], position):
            if found == source:
                yield request


def joined(request: Request) -> str:
    """The request's user turns as one text (what the prompt filter sees)."""
    return "\n".join(request.turns)


@dataclass(frozen=True)
class Candidates:
    """A batch: the requests to filter and answer, the candidates drawn (fewer than asked: the
    stream ran out) and the turns the target wrote (magpie)."""

    requests: list[Request]
    count: int
    written: list[Written] = field(default_factory=list)


class RequestStream(Protocol):
    """A source's candidates batch by batch, and the texts of a finished batch's candidates in
    order (`replayed`: the filter's memory on a restart)."""

    max_words: int  # the filter's limit on one request
    max_prompt: int  # tokens of a prompt (history included) past which it is dropped

    def batch(self, number: int, size: int) -> Candidates: ...

    def replayed(self, shard: Shard) -> list[str | None]: ...


class ConversationStream:
    """The requests of a conversation source (`conversation_requests`), in their order."""

    max_words, max_prompt = MAX_WORDS, MAX_PROMPT_TOKENS

    def __init__(self, requests: Iterator[Request]) -> None:
        self.requests = requests

    def batch(self, number: int, size: int) -> Candidates:
        requests = list(islice(self.requests, size))
        return Candidates(requests, len(requests))

    def replayed(self, shard: Shard) -> list[str | None]:
        return [joined(r) for r in islice(self.requests, shard.candidates)]


class MagpieStream:
    """User turns the target writes itself (`write`: magpie.py), `openings` in turn; batch n
    written with seed `seed`·1000003 + n."""

    max_words, max_prompt = magpie.MAX_WORDS, magpie.PROMPT_TOKENS

    def __init__(self, openings: list[magpie.Opening], write: magpie.Writer, seed: int) -> None:
        self.openings, self.write, self.seed = openings, write, seed

    def batch(self, number: int, size: int) -> Candidates:
        asked = [self.openings[(number * size + i) % len(self.openings)] for i in range(size)]
        turns = self.write(asked, self.seed * 1_000_003 + number)
        written = [Written(o.kind, o.hint, text) for o, text in turns]
        requests = [Request(w.kind, (w.text,)) for w in written if w.text is not None]
        return Candidates(requests, len(written), written)

    def replayed(self, shard: Shard) -> list[str | None]:
        return [w.text for w in shard.written]
