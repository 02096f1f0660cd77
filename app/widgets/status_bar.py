"""Status bar: state, device, model, memory in use (refreshed every two seconds), and notes.

A note (`note(text, ms)`) is cut with "…" to the room the permanent labels leave it, whole in
the bar's tooltip when cut, and fitted again whenever that room changes (the window resized, a
label reworded, a model loaded), so it never runs under the labels or ends mid-word at the edge.
"""

from __future__ import annotations

import os
import sys
import time

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QLabel, QStatusBar, QWidget

LABEL_SPACING = 12  # room each permanent label takes besides its text (margins, spacing)
EDGES = 24  # the message's own margins at both ends of the bar
MIN_ROOM = 80  # a note never gets less than this, even on a very narrow bar


def memory_text() -> str:
    """Resident memory of this process, plus CUDA memory when torch has a GPU in use."""
    try:
        import psutil

        rss = psutil.Process(os.getpid()).memory_info().rss
    except ImportError:  # psutil is optional
        try:
            with open("/proc/self/statm") as handle:
                rss = int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            return "memory: n/a"
    text = f"RAM {rss / 2**20:.0f} MiB"
    cuda = sys.modules.get("torch.cuda")  # never import torch just for this
    try:
        if cuda is not None and cuda.is_available() and cuda.is_initialized():
            text += f" · GPU {cuda.memory_allocated() / 2**20:.0f} MiB"
    except AttributeError:  # torch is still being imported by a worker thread
        pass
    return text


class StatusBar(QStatusBar):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = QLabel("starting")
        self.device = QLabel("device: —")
        self.model = QLabel("model: —")
        self.memory = QLabel(memory_text())
        for label in self.labels():
            label.setContentsMargins(6, 0, 6, 0)
            self.addPermanentWidget(label)
        self._note = ""  # the whole text of the note on show
        self._shown = ""  # what of it the bar shows (cut to the room)
        self._until: float | None = None  # when it goes (time.monotonic()); None: it stays
        self.messageChanged.connect(self._message_changed)
        self._timer = QTimer(self)
        self._timer.timeout.connect(lambda: self._relabel(self.memory, memory_text()))
        self._timer.start(2000)

    def labels(self) -> tuple[QLabel, ...]:
        return (self.state, self.device, self.model, self.memory)

    def room(self) -> int:
        """Pixels a note has: the bar's width less the permanent labels as their texts are now."""
        used = sum(label.sizeHint().width() + LABEL_SPACING for label in self.labels())
        return max(MIN_ROOM, self.width() - used - EDGES)

    def note(self, text: str, ms: int) -> None:
        """Show `text` for `ms` milliseconds (0: until the next message), fitted to the room."""
        self._note = text
        self._until = time.monotonic() + ms / 1000 if ms > 0 else None
        self._shown = ""
        self._fit()

    def _fit(self) -> None:
        if not self._note:
            return
        if self._shown and self.currentMessage() != self._shown:  # replaced or gone
            self._note = ""
            return
        remaining = 0
        if self._until is not None:
            remaining = round((self._until - time.monotonic()) * 1000)
            if remaining <= 0:
                return
        fitted = self.fontMetrics().elidedText(self._note, Qt.TextElideMode.ElideRight, self.room())
        if fitted == self._shown:
            return
        self._shown = fitted
        self.setToolTip(self._note if fitted != self._note else "")
        self.showMessage(fitted, remaining)

    def _message_changed(self, message: str) -> None:
        if not message or message != self._shown:  # the note went: so does its whole text
            self._note = self._shown = ""
            self.setToolTip("")

    def _relabel(self, label: QLabel, text: str) -> None:
        if label.text() != text:
            label.setText(text)
            self._fit()

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        self._fit()

    def set_state(self, state: str) -> None:
        self._relabel(self.state, state)

    def set_model(self, spec: str, device: str, dtype: str) -> None:
        self._relabel(self.model, f"model: {spec}")
        self._relabel(self.device, f"device: {device} · {dtype}")

    def clear_model(self) -> None:
        """No model is loaded (the engine process ended)."""
        self._relabel(self.model, "model: —")
        self._relabel(self.device, "device: —")
