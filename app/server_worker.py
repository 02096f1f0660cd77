"""Polling a serving engine in the background: `specdec_core.serving.server_metrics.watch` in a
worker thread (app/worker.py's pattern), one `polled` signal per poll. It never touches a
widget; Stop sets its flag, which also ends the wait between polls at once."""

from __future__ import annotations

from PySide6.QtCore import Signal

from app.worker import Worker
from specdec_core.serving.server_metrics import MetricsPoller, watch


class ServerWorker(Worker):
    polled = Signal(object)  # Poll
    what = "server polling"

    def __init__(self, poller: MetricsPoller, interval: float) -> None:
        super().__init__()
        self.poller = poller
        self.interval = interval

    def _run(self) -> None:
        for poll in watch(self.poller, self.interval, stop=self.stop_flag):
            self.polled.emit(poll)
