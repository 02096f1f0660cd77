"""Writing result files so that a crash or Ctrl+C mid-write never leaves half a file; sizes
as people read them."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, text: str | bytes) -> None:
    """Write `text` (or bytes) to a temporary file beside `path`, flush it to disk, then rename
    it over `path` (atomic on POSIX and Windows): readers see the old file or the new, never a
    part, and a writer killed midway leaves the old file (and at most a `.tmp` scratch file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, scratch = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".tmp", dir=path.parent)
    try:
        text_mode = {"mode": "w", "encoding": "utf-8", "newline": ""}
        with os.fdopen(fd, **({"mode": "wb"} if isinstance(text, bytes) else text_mode)) as handle:
            handle.write(text)
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
