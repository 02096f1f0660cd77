"""Results history: one JSON line per finished run in the platformdirs data dir.

`SPECDEC_DATA_DIR` overrides the directory. Failing to write history never breaks a run.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from platformdirs import user_data_dir

from specdec_core.events import RunSummary


def history_path() -> Path:
    root = os.environ.get("SPECDEC_DATA_DIR") or user_data_dir("specdec-playground")
    return Path(root) / "history.jsonl"


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
