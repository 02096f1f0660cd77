"""A chat: the conversation the Chat view shows, without Qt.

Turns alternate a user message and the assistant's reply; each reply keeps its `RunSummary`
(how its tokens were produced, τ, tokens/s, how much of the prompt came from the cached
conversation) and its speedup over its autoregressive reference (measured after it in the
background, or reused), with its 95 % interval over both runs' steps (`app/reference.py`).
What a saved reply keeps of them is its `ReplyNumbers` (method, τ, tokens/s, the speedup and
its interval), shown small under it when the chat is opened again. A reply cut by Stop is
kept, marked stopped, and is part of the history the next turn is asked with.

`messages(pending)` is what the chat template is applied over for the next reply: the system
prompt (when there is one), the answered turns, then `pending`. A chat saves as one JSON
object in the prompt files' format (`turns`: the user messages, plus `replies`, `system`,
`stopped` and `numbers`), so `specdec bench --prompts chat.jsonl --multi-turn` replays it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from app.engine_api import ChatMessage
from app.reference import RunSpeedup
from specdec_core.decoding.events import RunSummary
from specdec_core.errors import SpecdecError
from specdec_core.files import write_atomic

CONVERSATION = "chat"  # the engine-side name of the window's conversation cache
TITLE_CHARS = 48  # a conversation's title: the start of its first message


@dataclass(frozen=True)
class ReplyNumbers:
    """What a saved reply keeps of how it was produced."""

    method: str  # the method's label
    tau: float
    tokens_per_second: float
    new_tokens: int
    speedup: float | None = None  # None: not measured, or a timing disturbance
    interval: tuple[float, float] | None = None

    @classmethod
    def of(cls, label: str, summary: RunSummary, speedup: RunSpeedup | None) -> ReplyNumbers:
        shown = speedup is not None and not speedup.disturbed
        return cls(
            label,
            summary.mean_accept_length,
            summary.tokens_per_second,
            summary.new_tokens,
            speedup.ratio if shown and speedup is not None else None,
            speedup.interval if shown and speedup is not None else None,
        )

    @classmethod
    def from_record(cls, record: Any) -> ReplyNumbers | None:
        """The numbers of a saved reply; None for anything that is not a complete record."""
        if not isinstance(record, dict):
            return None
        try:
            interval = record.get("interval")
            return cls(
                str(record["method"]),
                float(record["tau"]),
                float(record["tokens_per_second"]),
                int(record["new_tokens"]),
                None if record.get("speedup") is None else float(record["speedup"]),
                (float(interval[0]), float(interval[1])) if interval else None,
            )
        except (KeyError, TypeError, ValueError, IndexError):
            return None


@dataclass
class Turn:
    user: str
    reply: str = ""
    summary: RunSummary | None = None
    speedup: RunSpeedup | None = None  # against an autoregressive run of the same history
    stopped: bool = False  # Stop cut the reply: what came before is kept
    numbers: ReplyNumbers | None = None  # what a saved reply keeps of `summary` and `speedup`


@dataclass
class Chat:
    turns: list[Turn] = field(default_factory=list)
    system: str = ""  # the system prompt its turns are asked with ("": none)

    @property
    def title(self) -> str:
        """The start of its first message, on one line."""
        if not self.turns:
            return "New conversation"
        words = " ".join(self.turns[0].user.split())
        return words if len(words) <= TITLE_CHARS else words[: TITLE_CHARS - 1] + "…"

    def messages(self, pending: str) -> tuple[ChatMessage, ...]:
        """The system prompt, the history of answered turns, then `pending` as the new user
        message."""
        history: list[ChatMessage] = []
        if self.system.strip():
            history.append(ChatMessage("system", self.system.strip()))
        for turn in self.turns:
            if not turn.reply:
                continue
            history += [ChatMessage("user", turn.user), ChatMessage("assistant", turn.reply)]
        return (*history, ChatMessage("user", pending))

    def ask(self, text: str) -> Turn:
        turn = Turn(text)
        self.turns.append(turn)
        return turn

    def answer(self, summary: RunSummary) -> None:
        last = self.turns[-1]
        last.reply, last.summary = summary.text, summary
        last.stopped = summary.stop_reason == "stopped"

    def take_last(self) -> str:
        """Remove the last turn (Edit last turn, Regenerate) and return its user message."""
        if not self.turns:
            raise SpecdecError("the chat is empty; there is no turn to edit")
        return self.turns.pop().user

    def to_record(self) -> dict:
        return {
            "turns": [t.user for t in self.turns],
            "replies": [t.reply for t in self.turns],
            "system": self.system,
            "stopped": [t.stopped for t in self.turns],
            "numbers": [asdict(t.numbers) if t.numbers else None for t in self.turns],
        }

    @classmethod
    def from_record(cls, turns: list[str], record: dict) -> Chat:
        """`turns` (read and checked as a prompt file's) with what `record` saved of them."""
        system = record.get("system", "")
        chat = cls([Turn(user) for user in turns], system if isinstance(system, str) else "")
        replies, stopped = record.get("replies", []), record.get("stopped", [])
        numbers = record.get("numbers", [])
        for index, turn in enumerate(chat.turns):
            reply = replies[index] if isinstance(replies, list) and index < len(replies) else ""
            turn.reply = reply if isinstance(reply, str) else ""
            cut = stopped[index] if isinstance(stopped, list) and index < len(stopped) else False
            turn.stopped = cut is True
            saved = numbers[index] if isinstance(numbers, list) and index < len(numbers) else None
            turn.numbers = ReplyNumbers.from_record(saved)
        return chat

    def save(self, path: Path) -> None:
        """One line of JSON: a prompt file with this chat's turns (and replies)."""
        write_atomic(path, json.dumps(self.to_record()) + "\n")

    @classmethod
    def load(cls, path: Path) -> Chat:
        """A saved chat (or the first line of any prompt file with `turns`); its replies are
        shown with the numbers saved with them, and the chat continues from them."""
        from specdec_core.run.prompts import read_conversations

        turns = read_conversations(path, limit=1)[0]
        record = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
        return cls.from_record(turns, record if isinstance(record, dict) else {})
