"""Background sweeps and auto-tune for the GUI: a worker that runs a backend's measurement.

The backends (where the numbers come from) are Qt-free, in app/sweep_backend.py:
`MeasureBackend` on any `Measure` (tests inject a fake one), `EngineBackend` on the engine's
loaded target; an engine whose models live in another process brings its own backend.

`SweepWorker` follows app/worker.py: a QObject moved to a QThread (via `Job`), signals out,
errors as messages, Stop through a `threading.Event` checked between grid points. It never
touches a widget.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Signal

from app.engine import Engine, StopFlag
from app.sweep_backend import EngineBackend, MeasureBackend, OnPoint, SweepBackend
from app.worker import Worker

__all__ = [
    "EngineBackend",
    "MeasureBackend",
    "OnPoint",
    "SweepBackend",
    "SweepWorker",
    "backend_for",
]


def backend_for(engine: Engine) -> SweepBackend:
    return engine.sweep_backend() or EngineBackend(engine)  # another process measures there


class SweepWorker(Worker):
    """Runs one sweep or one tune; emits `pointed` per measured point, `result`, then `done`."""

    pointed = Signal(object)  # SweepProgress
    result = Signal(object)  # SweepResult or TuneResult
    what = "sweep"

    def __init__(self, task: Callable[[OnPoint, StopFlag], Any]) -> None:
        super().__init__()
        self._task = task

    def _run(self) -> None:
        self.result.emit(self._task(self.pointed.emit, self.stop_flag))
