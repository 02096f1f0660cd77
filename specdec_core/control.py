"""How a caller follows and stops long work (loading, decoding, sweeps), defined once.

- `Progress(message, fraction)`: a status line and how far along (0..1), for model loads and
  downloads; the CLI prints it on stderr, the GUI shows it under Models.
- `StopFlag`: anything with `is_set()` (a `threading.Event`); the decode loop checks it
  between steps and a sweep between points, so Stop ends the work within one step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

Progress = Callable[[str, float], None]  # (message, fraction 0..1)


class StopFlag(Protocol):
    def is_set(self) -> bool: ...
