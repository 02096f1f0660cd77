"""Background sweeps and Tune for the GUI: a worker that runs one measurement of the engine.

The measurement itself is the engine's (`Engine.sweep`, `Engine.tune`, app/engine_api.py):
in the engine process by default, in this process with `--in-process`, a fake one in tests.

`SweepWorker` follows app/worker.py: a QObject moved to a QThread (via `Job`), signals out,
errors as messages, Stop through a `threading.Event` checked between grid points. It never
touches a widget.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Signal

from app.engine_api import OnPoint, StopFlag
from app.worker import Worker


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
