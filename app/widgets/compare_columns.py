"""Side-by-side token views, one coloured column per compared method."""

from __future__ import annotations

from PySide6.QtWidgets import QHBoxLayout, QLabel, QVBoxLayout, QWidget

from app.widgets.token_view import TokenView
from specdec_core.events import RunSummary, Step


class CompareColumn(QWidget):
    def __init__(self, method: str, label: str, color: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.method = method
        self.color = color
        self.header = QLabel(label)
        self.header.setStyleSheet(
            f"QLabel {{ color: white; background: {color}; font-weight: bold; padding: 3px 6px; }}"
        )
        self.view = TokenView()
        self.footer = QLabel("running…")
        self.footer.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.header)
        layout.addWidget(self.view, 1)
        layout.addWidget(self.footer)

    def finish(self, summary: RunSummary) -> None:
        self.footer.setText(
            f"{summary.new_tokens} tokens · τ {summary.mean_accept_length:.2f} · "
            f"{summary.tokens_per_second:.1f} tok/s"
        )

    def fail(self, message: str) -> None:
        self.footer.setText(f"failed: {message}")
        self.footer.setToolTip(message)
        self.footer.setStyleSheet("QLabel { color: #c1121f; }")


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
