"""How a caller follows and stops long work (loading, decoding, sweeps), defined once.

- `Progress(message, fraction)`: a status line and how far along (0..1), for model loads and
  downloads; the CLI prints it on stderr, the GUI shows it under Models.
- `StopFlag`: anything with `is_set()` (a `threading.Event`); the decode loop checks it
  between steps and a sweep between points, so Stop ends the work within one step; a model
  load checks it between downloaded chunks and loading stages (`check_stop`) and then raises
  `Cancelled`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from specdec_core.errors import SpecdecError

Progress = Callable[[str, float], None]  # (message, fraction 0..1)


class StopFlag(Protocol):
    def is_set(self) -> bool: ...


class Cancelled(SpecdecError):
    """The user stopped a download or a load; nothing half-done is kept in use."""

    def __init__(self, what: str = "the load") -> None:
        super().__init__(
            f"{what} was cancelled; load again to continue (a download resumes where it stopped)"
        )


def check_stop(stop: StopFlag | None, what: str = "the load") -> None:
    """Raise `Cancelled` if `stop` is set."""
    if stop is not None and stop.is_set():
        raise Cancelled(what)
