"""A small group box that explains each token colour in a sentence."""

from __future__ import annotations

from PySide6.QtWidgets import QFormLayout, QGroupBox, QLabel, QWidget

from app.palette import KIND_COLORS, KIND_HELP, KIND_LABELS, TEXT_COLOR
from specdec_core.decoding.events import TokenKind


def chip_style(kind: TokenKind) -> str:
    if kind is TokenKind.REJECTED_DRAFT:
        style = f"color: {KIND_COLORS[kind]}; text-decoration: line-through;"
    else:
        style = f"color: {TEXT_COLOR}; background: {KIND_COLORS[kind]};"
    return f"QLabel {{ {style} padding: 2px 6px; border-radius: 3px; }}"


class KindHelp(QGroupBox):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Token colours", parent)
        form = QFormLayout(self)
        for kind in TokenKind:
            chip = QLabel(KIND_LABELS[kind])
            chip.setStyleSheet(chip_style(kind))
            text = QLabel(KIND_HELP[kind])
            text.setWordWrap(True)
            form.addRow(chip, text)
