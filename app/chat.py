"""A chat: the conversation the Chat view shows, without Qt.

Turns alternate a user message and the assistant's reply; each reply keeps its `RunSummary`
(how its tokens were produced, τ, tokens/s, how much of the prompt came from the cached
conversation) and its speedup over its autoregressive reference (measured after it in the
background, or reused), with its 95 % interval over both runs' steps (`app/reference.py`; not
saved: a loaded chat's replies are shown, not measured). `messages(pending)` is what the chat
template is applied over for the next reply. A chat saves as one JSON object in the prompt
files' format (`turns`: the user messages, plus `replies`), so `specdec bench --prompts
chat.jsonl --multi-turn` replays it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from app.engine_api import ChatMessage
from app.reference import RunSpeedup
from specdec_core.decoding.events import RunSummary
from specdec_core.errors import SpecdecError
from specdec_core.files import write_atomic

CONVERSATION = "chat"  # the engine-side name of the window's conversation cache


@dataclass
class Turn:
    user: str
    reply: str = ""
    summary: RunSummary | None = None
    speedup: RunSpeedup | None = None  # against an autoregressive run of the same history


@dataclass
class Chat:
    turns: list[Turn] = field(default_factory=list)

    def messages(self, pending: str) -> tuple[ChatMessage, ...]:
        """The history of answered turns, then `pending` as the new user message."""
        history: list[ChatMessage] = []
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

    def take_last(self) -> str:
        """Remove the last turn (Edit last turn, Regenerate) and return its user message."""
        if not self.turns:
            raise SpecdecError("the chat is empty; there is no turn to edit")
        return self.turns.pop().user

    def to_record(self) -> dict:
        return {"turns": [t.user for t in self.turns], "replies": [t.reply for t in self.turns]}

    def save(self, path: Path) -> None:
        """One line of JSON: a prompt file with this chat's turns (and replies)."""
        write_atomic(path, json.dumps(self.to_record()) + "\n")

    @classmethod
    def load(cls, path: Path) -> Chat:
        """A saved chat (or the first line of any prompt file with `turns`); replies that were
        saved are shown, not measured (they have no summary and are answered again)."""
        from specdec_core.run.prompts import read_conversations

        turns = read_conversations(path, limit=1)[0]
        record = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
        replies = record.get("replies", [])
        chat = cls([Turn(user) for user in turns])
        for turn, reply in zip(chat.turns, replies, strict=False):
            turn.reply = reply if isinstance(reply, str) else ""
        return chat
