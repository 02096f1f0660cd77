"""The Adaptation box: adapt the EAGLE head to my runs, τ before and after, Reset, Save.

Reset and Save adapted head… act on a head that has adapted: until one has (Adapt on, then an
EAGLE method's run) they are off and say so, whatever the method (one that drafts without a
head has nothing to reset or save)."""

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


RESET_TIP = "back to the loaded head; the kept runs are forgotten"
SAVE_TIP = "write the adapted head to a new directory (then pick it as Head)"
NOTHING_YET = "no head has adapted yet: turn on Adapt and run an EAGLE method (eagle, eagle2, …)"


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
        self.reset.setToolTip(RESET_TIP)
        self.save = QPushButton("Save adapted head…")
        self.save.setToolTip(SAVE_TIP)
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

        self.busy, self.adapted = False, False
        self._enable()

    def show_tau(self, line: str) -> None:
        self.tau.setText(line)

    def set_busy(self, busy: bool) -> None:
        self.busy = busy
        self._enable()

    def set_adapted(self, adapted: bool) -> None:
        """Has a head adapted since it was loaded (or reset)?"""
        self.adapted = adapted
        self._enable()

    def _enable(self) -> None:
        for button, tip in ((self.reset, RESET_TIP), (self.save, SAVE_TIP)):
            button.setEnabled(self.adapted and not self.busy)
            button.setToolTip(tip if self.adapted else NOTHING_YET)
