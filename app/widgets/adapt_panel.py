"""The Adaptation box: adapt the EAGLE head to my runs, τ before and after, Reset, Save."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QCheckBox, QGroupBox, QHBoxLayout, QLabel, QPushButton, QVBoxLayout

TIP = (
    "After each EAGLE run (eagle, eagle2, eagle2-lookup) the head is fine-tuned for about half "
    "a second on that run's target features, between runs and never during one, regularised "
    "toward the loaded head so it does not forget. Output stays the target's: the verifier "
    "decides every token, whatever the head learns. It learns the runs themselves: prompts "
    "you run again, or that share their text, draft better; new prompts of the same kind gain "
    "little (docs/benchmarks.md). Turn it off to compare settings on one prompt: the head "
    "changes between those runs."
)


class AdaptPanel(QGroupBox):
    toggled = Signal(bool)
    reset_requested = Signal()
    save_requested = Signal()

    def __init__(self, parent=None) -> None:
        super().__init__("Adaptation", parent)
        self.enabled = QCheckBox("Adapt the head to my runs")
        self.enabled.setToolTip(TIP)
        self.tau = QLabel("")
        self.tau.setWordWrap(True)
        self.tau.setToolTip("τ of the runs before the first adaptation against the latest run")
        self.reset = QPushButton("Reset")
        self.reset.setToolTip("back to the loaded head; the kept runs are forgotten")
        self.save = QPushButton("Save adapted head…")
        self.save.setToolTip("write the adapted head to a new directory (then pick it as Head)")
        buttons = QHBoxLayout()
        buttons.addWidget(self.reset)
        buttons.addWidget(self.save)
        layout = QVBoxLayout(self)
        layout.addWidget(self.enabled)
        layout.addWidget(self.tau)
        layout.addLayout(buttons)
        self.enabled.toggled.connect(self.toggled)
        self.reset.clicked.connect(self.reset_requested)
        self.save.clicked.connect(self.save_requested)

    def show_tau(self, line: str) -> None:
        self.tau.setText(line)

    def set_busy(self, busy: bool) -> None:
        self.reset.setEnabled(not busy)
        self.save.setEnabled(not busy)
