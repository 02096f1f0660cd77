"""A row of colour chips explaining the token colours."""

from __future__ import annotations

from PySide6.QtWidgets import QHBoxLayout, QLabel, QWidget

from app.palette import KIND_HELP, KIND_LABELS
from app.widgets.kind_help import chip_style
from specdec_core.decoding.events import TokenKind


class Legend(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(6)
        self.chips: dict[TokenKind, QLabel] = {}
        for kind in TokenKind:
            chip = QLabel(KIND_LABELS[kind])
            chip.setToolTip(KIND_HELP[kind])
            chip.setStyleSheet(chip_style(kind))
            layout.addWidget(chip)
            self.chips[kind] = chip
        layout.addStretch(1)
