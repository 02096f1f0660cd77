"""Writing files so that a crash or Ctrl+C mid-write never leaves half a file, and sizes as
people read them. Every file a resume reads (checkpoints, feature shards, answers, job files,
cards, heads) is written here: `write_atomic` for text and bytes, `save_atomic` for torch
objects, `save_tensors_atomic` for safetensors."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


def write_atomic(path: Path, text: str | bytes) -> None:
    """Write `text` (or bytes) to a temporary file beside `path`, flush it to disk, then rename
    it over `path` (atomic on POSIX and Windows): readers see the old file or the new, never a
    part, and a writer killed midway leaves the old file (and at most a `.tmp` scratch file)."""
    text_mode = {"mode": "w", "encoding": "utf-8", "newline": ""}
    mode = {"mode": "wb"} if isinstance(text, bytes) else text_mode
    _atomic(Path(path), mode, lambda handle: handle.write(text))


def save_atomic(path: Path, obj: Any) -> None:
    """`torch.save(obj)` to `path` as `write_atomic` writes: all of it or none."""
    import torch

    _atomic(Path(path), {"mode": "wb"}, lambda handle: torch.save(obj, handle))


def save_tensors_atomic(path: Path, tensors: dict, metadata: dict[str, str] | None = None) -> None:
    """A safetensors file of `tensors` at `path`, as `write_atomic` writes: all of it or none."""
    from safetensors.torch import save

    write_atomic(Path(path), save(tensors, metadata=metadata))


def _atomic(path: Path, mode: dict, write: Callable[[IO], Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, scratch = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, **mode) as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(scratch, path)
    except BaseException:
        Path(scratch).unlink(missing_ok=True)
        raise


def format_duration(seconds: float | None) -> str:
    """Seconds as people read them: '7m05s', '3h12m' ('?' for None)."""
    if seconds is None:
        return "?"
    whole = int(seconds)
    if whole >= 3600:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 60}m{whole % 60:02d}s"


def format_size(size: float) -> str:
    """Bytes as people read them: '812 MB', '4.9 GB' (powers of 1000, like file managers)."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(size) >= scale:
            value = size / scale
            return f"{value:.1f} {unit}" if value < 100 else f"{value:.0f} {unit}"
    return f"{int(size)} B"
