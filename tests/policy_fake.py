"""A fake engine whose distance measurement waits at a gate: a test sees the window while a
lossy run's distance is being measured, and may press Stop then."""

from __future__ import annotations

import threading

from app.engine_api import RunRequest, StopFlag
from specdec_core.decoding.events import RunSummary
from specdec_core.measurement.run_distance import RunDistance
from tests.gui_fake import FakeEngine


class GatedDistanceEngine(FakeEngine):
    """`FakeEngine`, its lossy distance held until `gate` is set (or Stop is pressed);
    `measuring` is set once a measurement waits."""

    def __init__(self, steps: int = 4) -> None:
        super().__init__(steps=steps)
        self.gate = threading.Event()
        self.measuring = threading.Event()

    def distance(
        self, request: RunRequest, summary: RunSummary, stop: StopFlag
    ) -> RunDistance | None:
        if summary.lossy:
            self.measuring.set()
            while not self.gate.wait(0.01):
                if stop.is_set():
                    self.distances.append(request)
                    return None
        return super().distance(request, summary, stop)
