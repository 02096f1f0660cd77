"""Results history: one JSON line per finished run in the platformdirs data dir.

`SPECDEC_DATA_DIR` overrides the directory. Failing to write history never breaks a run.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from platformdirs import user_data_dir

from specdec_core.decoding.events import RunSummary


def history_path() -> Path:
    root = os.environ.get("SPECDEC_DATA_DIR") or user_data_dir("specdec-playground")
    return Path(root) / "history.jsonl"


def check(path: Path | None = None) -> str | None:
    """Set a history file aside when a line of it is not JSON (a crash mid-write, an edit):
    it moves to `history.jsonl.corrupt` and a new file starts. Returns a note, or None."""
    path = path or history_path()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
        for line in lines:
            if line.strip():
                json.loads(line)
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, ValueError) as error:
        aside = path.with_name(path.name + ".corrupt")
        try:
            os.replace(path, aside)
        except OSError:
            return f"history file {path} is unreadable ({error}) and could not be moved aside"
        return f"history file {path} was unreadable ({error}); moved to {aside.name}"
    return None


def record(summary: RunSummary, prompt: str, path: Path | None = None) -> bool:
    """Append one run; False if it could not be written."""
    path = path or history_path()
    entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "prompt": prompt}
    entry.update(summary.to_record())
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry, default=str) + "\n")
    except OSError:
        return False
    return True
