"""From the Train tab to a Compare: a finished head is listed in the Head picker (its folder
is added, it goes on top of the recent list) while the head selected before stays selected;
Compare with trained head selects it and runs the Compare (a Compare runs one head, so the
head it replaces is the previous Compare's; both stay in the Head list)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtWidgets import QStatusBar

from app.train_controller import TrainController
from app.widgets.models_panel import ModelsPanel

SHOWN_MS = 10_000


class TrainedHead:
    def __init__(
        self,
        training: TrainController,
        models: ModelsPanel,
        bar: QStatusBar,
        compare: Callable[[], object],
    ) -> None:
        """`compare()` runs a Compare with the settings of the window."""
        self.models, self.bar, self.compare = models, bar, compare
        self.head = ""  # the head the Train tab finished last
        self.before = ""  # the head selected when it finished
        training.head_ready.connect(self.add)
        training.view.compare_button.clicked.connect(self.compare_with_it)

    def add(self, head: str) -> None:
        current = self.models.head.spec()
        self.models.add_folder(str(Path(head).parent))
        self.models.head.remember(head)
        self.models.head.set_spec(current)
        self.head, self.before = head, current

    def compare_with_it(self) -> None:
        if not self.head:
            return
        self.models.head.set_spec(self.head)
        replaced = self.before or "no head"
        message = f"comparing with the trained head {self.head} (it replaces {replaced})"
        self.bar.showMessage(message, SHOWN_MS)
        self.compare()
