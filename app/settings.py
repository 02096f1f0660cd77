"""Persistent GUI settings: one JSON file in the platformdirs config dir.

`SPECDEC_CONFIG_DIR` overrides the directory (tests, portable installs). Writes are atomic
(temporary file + `os.replace`), so a crash never leaves half a file. A file that cannot be
read or parsed falls back to the defaults with a note for the status bar; it is moved aside
to `settings.json.corrupt` so the user can inspect it. Unknown keys are ignored; a value of
the wrong type takes its default.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from platformdirs import user_config_dir

from specdec_core.files import write_atomic

FILENAME = "settings.json"

DEFAULTS: dict[str, Any] = {
    "target": "embedded",
    "draft": "embedded",
    "head": "embedded",
    "device": "auto",
    "dtype": "auto",
    "recent_target": [],
    "recent_draft": [],
    "recent_head": [],
    "device_map": "none",  # or auto, balanced, sequential (accelerate)
    "max_memory": "",  # DEVICE=SIZE[,…] with a device map
    "trust_remote_code": False,
    "model_folders": [],  # where the pickers look for .gguf files and model folders
    "method": "eagle2-lookup",  # app/first_run.py says why
    "policy": "lossless",
    "k": 4,
    "temperature": 0.0,
    "top_p": 1.0,
    "max_new_tokens": 64,
    "seed": 0,
    "tree_depth": 0,  # 0 = auto
    "tree_topk": 0,
    "tree_tokens": 0,
    "raw": False,
    "show_rejected": False,
    "chat_mode": False,  # the Chat tab was open
    "compare_methods": ["eagle", "eagle2", "eagle2-lookup"],
    "prompt": "Explain speculative decoding in three sentences.",
    "geometry": "",
    "splitter": "",
    "server_url": "http://localhost:8000",  # the Server tab (vLLM's default port)
}


def config_dir() -> Path:
    return Path(os.environ.get("SPECDEC_CONFIG_DIR") or user_config_dir("specdec-playground"))


def settings_path() -> Path:
    return config_dir() / FILENAME


def load_settings(path: Path | None = None) -> tuple[dict[str, Any], str | None]:
    """(settings merged over the defaults, a note for the user or None)."""
    path = path or settings_path()
    values = dict(DEFAULTS)
    if not path.exists():
        return values, None
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(stored, dict):
            raise ValueError("not a JSON object")
    except (OSError, UnicodeDecodeError, ValueError) as error:
        _move_aside(path)
        return values, f"settings file {path} was unreadable ({error}); using defaults"
    for key, default in DEFAULTS.items():
        value = stored.get(key, default)
        if _same_type(value, default):
            values[key] = value
    return values, None


def save_settings(values: dict[str, Any], path: Path | None = None) -> None:
    data = {key: values[key] for key in DEFAULTS if key in values}
    write_atomic(path or settings_path(), json.dumps(data, indent=2))


def _same_type(value: Any, default: Any) -> bool:
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(default, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float))
    return isinstance(value, type(default))


def _move_aside(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.replace(path, path.with_name(path.name + ".corrupt"))
