"""The saved conversations: one JSON file each in `chats/` of the user data dir (platformdirs,
beside the run history; `SPECDEC_DATA_DIR` overrides it), written atomically after every turn.

Each file is the chat's own record (app/chat.py: a prompt file's line, so `specdec bench
--multi-turn` replays it), named by when the conversation began. `listing()` gives them newest
first by when they were last written; a file that cannot be read is left out of the list (and
left on disk), so one damaged file never hides the others.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from app import history
from app.chat import Chat
from specdec_core.errors import SpecdecError

FOLDER = "chats"
SUFFIX = ".json"


@dataclass(frozen=True)
class SavedChat:
    """A saved conversation as the list shows it."""

    key: str  # its file's name without the suffix
    title: str
    turns: int
    updated: float  # when it was last written (seconds since the epoch)

    def label(self) -> str:
        """'What is speculative decoding? · 2 turns · 14:05' (a date when not today)."""
        stamp = time.localtime(self.updated)
        today = time.localtime()
        same_day = stamp[:3] == today[:3]
        when = time.strftime("%H:%M" if same_day else "%Y-%m-%d", stamp)
        turns = f"{self.turns} turn{'s' if self.turns != 1 else ''}"
        return f"{self.title} · {turns} · {when}"


def chats_dir() -> Path:
    return history.history_path().parent / FOLDER


class ChatStore:
    """Conversations saved in `folder`, one file each."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    @classmethod
    def default(cls) -> ChatStore:
        return cls(chats_dir())

    def new_key(self) -> str:
        """A name for a conversation beginning now, unused in the folder."""
        base = time.strftime("%Y%m%d-%H%M%S")
        key, number = base, 1
        while self.path(key).exists():
            number += 1
            key = f"{base}-{number}"
        return key

    def path(self, key: str) -> Path:
        return self.folder / f"{key}{SUFFIX}"

    def save(self, key: str, chat: Chat) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        chat.save(self.path(key))

    def load(self, key: str) -> Chat:
        path = self.path(key)
        if not path.exists():
            raise SpecdecError(f"the conversation {path.name} is no longer saved; pick another")
        try:
            return Chat.load(path)
        except (OSError, ValueError) as error:
            raise SpecdecError(
                f"the conversation {path} could not be read ({error}); pick another"
            ) from error

    def delete(self, key: str) -> None:
        self.path(key).unlink(missing_ok=True)

    def listing(self) -> list[SavedChat]:
        """Every readable saved conversation, the most recently written first."""
        saved = []
        for path in self.folder.glob(f"*{SUFFIX}"):
            try:
                chat = Chat.load(path)
                updated = path.stat().st_mtime
            except (SpecdecError, OSError, ValueError):
                continue
            saved.append(SavedChat(path.stem, chat.title, len(chat.turns), updated))
        return sorted(saved, key=lambda s: (s.updated, s.key), reverse=True)
