"""Side-by-side token views, one coloured column per compared method."""

from __future__ import annotations

from PySide6.QtWidgets import QHBoxLayout, QWidget

from app.widgets.compare_column import CompareColumn
from specdec_core.events import Step


class CompareColumns(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._layout = QHBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
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
