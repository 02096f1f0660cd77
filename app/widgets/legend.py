"""A row of colour chips explaining the token colours."""

from __future__ import annotations

from PySide6.QtWidgets import QHBoxLayout, QLabel, QWidget

from app.palette import KIND_COLORS, KIND_HELP, KIND_LABELS, TEXT_COLOR
from specdec_core.events import TokenKind


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
            if kind is TokenKind.REJECTED_DRAFT:
                style = f"color: {KIND_COLORS[kind]}; text-decoration: line-through;"
            else:
                style = f"color: {TEXT_COLOR}; background: {KIND_COLORS[kind]};"
            chip.setStyleSheet(f"QLabel {{ {style} padding: 2px 6px; border-radius: 3px; }}")
            layout.addWidget(chip)
            self.chips[kind] = chip
        layout.addStretch(1)
