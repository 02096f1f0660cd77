"""Status bar: state, device, model, memory in use (refreshed every two seconds)."""

from __future__ import annotations

import os
import sys

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QLabel, QStatusBar, QWidget


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
    torch = sys.modules.get("torch")  # never import torch just for this
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        text += f" · GPU {torch.cuda.memory_allocated() / 2**20:.0f} MiB"
    return text


class StatusBar(QStatusBar):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = QLabel("starting")
        self.device = QLabel("device: —")
        self.model = QLabel("model: —")
        self.memory = QLabel(memory_text())
        for label in (self.state, self.device, self.model, self.memory):
            label.setContentsMargins(6, 0, 6, 0)
            self.addPermanentWidget(label)
        self._timer = QTimer(self)
        self._timer.timeout.connect(lambda: self.memory.setText(memory_text()))
        self._timer.start(2000)

    def set_state(self, state: str) -> None:
        self.state.setText(state)

    def set_model(self, spec: str, device: str, dtype: str) -> None:
        self.model.setText(f"model: {spec}")
        self.device.setText(f"device: {device} · {dtype}")

    def clear_model(self) -> None:
        """No model is loaded (the engine process ended)."""
        self.model.setText("model: —")
        self.device.setText("device: —")
