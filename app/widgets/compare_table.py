"""The comparison table: tokens/s, speedup vs autoregressive, τ, identical to autoregressive."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QTableWidget,
    QTableWidgetItem,
    QWidget,
)

from app.export import CompareResult, result_rows
from specdec_core.speedup_bound import MeasuredSpeedup

HEADERS = (
    "Method",
    "Policy",
    "Tokens",
    "Steps",
    "τ",
    "Tokens/s",
    "Speedup vs AR",
    "Identical to AR",
)


def _cells(row: dict) -> list[str]:
    speedup = row["speedup_vs_ar"]
    identical = row["identical_to_ar"]
    return [
        row["label"],
        row["policy"] + (" (LOSSY)" if row["lossy"] else ""),
        str(row["new_tokens"]),
        str(row["steps"]),
        f"{row['mean_accept_length']:.2f}",
        f"{row['tokens_per_second']:.1f}",
        "—" if speedup is None else _bound(row).label(),
        "—" if identical is None else ("yes" if identical else "no"),
    ]


def _bound(row: dict) -> MeasuredSpeedup:
    return MeasuredSpeedup(row["speedup_vs_ar"], row["mean_accept_length"], row["lossy"])


class CompareTable(QTableWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(0, len(HEADERS), parent)
        self.setHorizontalHeaderLabels(HEADERS)
        self.verticalHeader().setVisible(False)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        # every column as wide as its text (a method's name never wraps into a tall row); a
        # narrow window scrolls the table sideways, and the last column takes what is left
        self.setWordWrap(False)
        header = self.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)

    def show_results(self, results: list[CompareResult]) -> None:
        rows = result_rows(results)
        self.setRowCount(len(rows))
        for r, (result, row) in enumerate(zip(results, rows, strict=True)):
            for c, text in enumerate(_cells(row)):
                item = QTableWidgetItem(text)
                if HEADERS[c] == "Speedup vs AR" and row["speedup_vs_ar"] is not None:
                    item.setToolTip(_bound(row).why())
                if c:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignCenter)
                else:
                    item.setForeground(QColor(result.color))
                    item.setData(Qt.ItemDataRole.DecorationRole, QColor(result.color))
                self.setItem(r, c, item)
        self.resizeRowsToContents()
        self.setFixedHeight(self.fitted_height())

    def fitted_height(self) -> int:
        """Height that shows the header and every row without a scroll bar (at least 3 rows)."""
        rows = self.verticalHeader().length() if self.rowCount() >= 3 else 3 * 30
        scroll = self.horizontalScrollBar().sizeHint().height()  # room for it when it shows
        return (
            self.horizontalHeader().sizeHint().height() + rows + scroll + 2 * self.frameWidth() + 4
        )
