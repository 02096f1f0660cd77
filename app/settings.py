"""Persistent GUI settings: a `GuiSettings` record, one JSON file in the platformdirs config dir.

The file is one flat JSON object, a key per field (as every earlier version wrote it), and the
record becomes JSON only where the file is read or written. `SPECDEC_CONFIG_DIR` overrides the
directory (tests, portable installs). Writes are atomic (temporary file + `os.replace`), so a
crash never leaves half a file. A file that cannot be read or parsed falls back to the
defaults with a note for the status bar; it is moved aside to `settings.json.corrupt` so the
user can inspect it. Unknown keys are ignored; a value of the wrong type keeps its default.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from platformdirs import user_config_dir

from specdec_core.files import write_atomic

FILENAME = "settings.json"


@dataclass(frozen=True)
class GuiSettings:
    """What the window remembers: the models, the decoding settings, the prompt, the layout."""

    target: str = "embedded"
    draft: str = "embedded"
    head: str = "embedded"
    medusa: str = "embedded"  # Medusa heads (method medusa)
    speculator: str = "embedded"  # an MLP speculator (method mlp-speculator)
    mtp: str = "embedded"  # the checkpoint whose MTP layers draft (embedded: the target's own)
    dflash: str = "embedded"  # a DFlash block drafter (methods dflash, ddtree)
    device: str = "auto"
    dtype: str = "auto"
    recent_target: tuple[str, ...] = ()
    recent_draft: tuple[str, ...] = ()
    recent_head: tuple[str, ...] = ()
    recent_medusa: tuple[str, ...] = ()
    recent_speculator: tuple[str, ...] = ()
    recent_mtp: tuple[str, ...] = ()
    recent_dflash: tuple[str, ...] = ()
    device_map: str = "none"  # or auto, balanced, sequential (accelerate)
    max_memory: str = ""  # DEVICE=SIZE[,…] with a device map
    trust_remote_code: bool = False
    model_folders: tuple[str, ...] = ()  # where the pickers look for .gguf files and folders
    method: str = "eagle2-lookup"  # app/first_run.py says why
    policy: str = "lossless"
    policy_profile: str = ""  # a `specdec tune-policy` profile deciding the policy per prompt
    k: int = 4
    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 64
    seed: int = 0
    tree_depth: int = 0  # 0 = auto
    tree_topk: int = 0
    tree_tokens: int = 0
    raw: bool = False
    show_rejected: bool = False
    measure_speedup: bool = True  # a Generate's or chat turn's autoregressive reference
    chat_mode: bool = False  # the Chat tab was open
    system_prompt: str = ""  # the chat's system message ("": none)
    chat_max_new_tokens: int = 512  # a chat reply's cap (it ends at the end of turn before)
    compare_methods: tuple[str, ...] = ("eagle", "eagle2", "eagle2-lookup")
    prompt: str = "Explain speculative decoding in three sentences."
    geometry: str = ""  # the window's saved geometry, hex
    splitter: str = ""  # the panes' saved sizes, hex
    server_url: str = "http://localhost:8000"  # the Server tab (vLLM's default port)

    def merged(self, values: Mapping[str, Any]) -> GuiSettings:
        """These settings with each value of `values` named like a field and of its type (a
        whole number for a float, a list of strings for a tuple); the rest stays as it is."""
        changes = {}
        for name in (f.name for f in fields(self)):
            if name in values:
                value = _of_type(values[name], getattr(self, name))
                if value is not None:
                    changes[name] = value
        return replace(self, **changes)


DEFAULTS = GuiSettings()


def config_dir() -> Path:
    return Path(os.environ.get("SPECDEC_CONFIG_DIR") or user_config_dir("specdec-playground"))


def settings_path() -> Path:
    return config_dir() / FILENAME


def load_settings(path: Path | None = None) -> tuple[GuiSettings, str | None]:
    """(the settings in the file over the defaults, a note for the user or None)."""
    path = path or settings_path()
    if not path.exists():
        return DEFAULTS, None
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(stored, dict):
            raise ValueError("not a JSON object")
    except (OSError, UnicodeDecodeError, ValueError) as error:
        _move_aside(path)
        return DEFAULTS, f"settings file {path} was unreadable ({error}); using defaults"
    return DEFAULTS.merged(stored), None


def save_settings(settings: GuiSettings, path: Path | None = None) -> None:
    write_atomic(path or settings_path(), json.dumps(asdict(settings), indent=2))


def _of_type(value: Any, current: Any) -> Any:
    """`value` as the type of `current`, or None when it is not one."""
    if isinstance(current, bool) or isinstance(value, bool):
        return value if isinstance(value, bool) and isinstance(current, bool) else None
    if isinstance(current, float):
        return float(value) if isinstance(value, (int, float)) else None
    if isinstance(current, tuple):
        strings = isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
        return tuple(value) if strings else None
    return value if isinstance(value, type(current)) else None


def _move_aside(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.replace(path, path.with_name(path.name + ".corrupt"))
