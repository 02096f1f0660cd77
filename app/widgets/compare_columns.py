"""Side-by-side token views, one coloured column per compared method.

The columns share the width they are given; when more methods are compared than fit (each
column keeps its minimum), they scroll sideways instead of widening the window past the
screen."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QHBoxLayout, QScrollArea, QWidget

from app.widgets.compare_column import CompareColumn
from specdec_core.decoding.events import Step


class CompareColumns(QScrollArea):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.setVerticalScrollBarPolicy(
            Qt.ScrollBarPolicy.ScrollBarAlwaysOff
        )  # each column scrolls
        inner = QWidget()
        self._layout = QHBoxLayout(inner)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self.setWidget(inner)
        self.columns: dict[str, CompareColumn] = {}
        self.show_rejected = False

    def clear(self) -> None:
        for column in self.columns.values():
            self._layout.removeWidget(column)
            column.deleteLater()
        self.columns.clear()

    def add_column(self, method: str, label: str, color: str) -> CompareColumn:
        column = CompareColumn(method, label, color)
        column.view.set_show_rejected(self.show_rejected)
        self.columns[method] = column
        self._layout.addWidget(column, 1)
        return column

    def add_step(self, method: str, step: Step) -> None:
        self.columns[method].view.add_step(step)

    def set_show_rejected(self, show: bool) -> None:
        self.show_rejected = show
        for column in self.columns.values():
            column.view.set_show_rejected(show)
