"""The comparison table: tokens/s, speedup vs autoregressive, τ, identical to autoregressive.

A method's name is never cut: where its column is as wide as the longest name (the table on
its own, which scrolls sideways when narrow) each name is one line; where the column takes only
what the numbers leave (Compare's tab at 1280 pixels), a longer name wraps at its spaces onto a
second line and its row grows to hold it, as the column's width changes. The numbers never wrap.

A speedup is against the autoregressive run of the same Compare, shown as "1.60× (1.52–1.68)":
the ratio and its 95 % interval over both runs' steps (the tooltip says so); a lossless
ratio above τ is "timing disturbed", with the reason in the tooltip.

A run Stop cut short reads "(stopped)" after its name and its tokens of the most it was asked
for (where its config says), in grey, with "—" for identity: a partial row is never shown as a
finished one."""

from __future__ import annotations

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QRect, QSize, Qt, QTimer
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QTableWidget,
    QTableWidgetItem,
    QWidget,
)

from app.export import CompareResult, result_rows, stopped
from specdec_core.measurement.speedup_bound import MeasuredSpeedup

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


PARTIAL = "#777777"  # the text of a row Stop cut short


def name_cell(result: CompareResult) -> str:
    """The method's name; 'Autoregressive (stopped)' for a run Stop cut short."""
    return f"{result.label} (stopped)" if stopped(result.summary) else result.label


def tokens_cell(result: CompareResult) -> str:
    """'32', or for a run Stop cut short '13 of 32' (where its config says the most it was
    asked for)."""
    summary = result.summary
    most = summary.config.get("max_new_tokens") if stopped(summary) else None
    return f"{summary.new_tokens} of {most}" if most else str(summary.new_tokens)


def partial_tip(result: CompareResult) -> str:
    """The tooltip of a run Stop cut short."""
    return (
        f"stopped after {tokens_cell(result)} tokens: a partial run (its tokens/s and speedup "
        "are of the part it ran; no whole answer to compare)"
    )


def _cells(row: dict, result: CompareResult) -> list[str]:
    speedup = row["speedup_vs_ar"]
    identical = row["identical_to_ar"]
    return [
        name_cell(result),
        row["policy"] + (" (LOSSY)" if row["lossy"] else ""),
        tokens_cell(result),
        str(row["steps"]),
        f"{row['mean_accept_length']:.2f}",
        f"{row['tokens_per_second']:.1f}",
        "—" if speedup is None else _speedup_cell(row),
        "—" if identical is None else ("yes" if identical else "no"),
    ]


def _bound(row: dict) -> MeasuredSpeedup:
    return MeasuredSpeedup(row["speedup_vs_ar"], row["mean_accept_length"], row["lossy"])


def _interval(row: dict) -> tuple[float, float] | None:
    low, high = row["speedup_interval_low"], row["speedup_interval_high"]
    return None if low is None or high is None else (low, high)


def _speedup_cell(row: dict) -> str:
    """'1.60× (1.52–1.68)': the ratio and its 95 % interval; 'timing disturbed' above τ."""
    bound, interval = _bound(row), _interval(row)
    if bound.disturbed or interval is None:
        return bound.label()
    return f"{bound.label()} ({interval[0]:.2f}–{interval[1]:.2f})"


def _speedup_tip(row: dict) -> str:
    bound = _bound(row)
    if bound.disturbed:
        return f"{bound.why()} (Run comparison again re-measures it)"
    if row["method"] == "ar":
        return "the reference: every speedup is tokens/s over this run's, in the same Compare"
    measured = "tokens/s over the autoregressive run's in the same Compare"
    if _interval(row) is None:
        return measured
    return f"{measured}; in brackets its 95% interval over both runs' steps (a bootstrap)"


Index = QModelIndex | QPersistentModelIndex


class NameDelegate(QStyledItemDelegate):
    """The name column's cells: wrapped at the column's width (at spaces), so a name the column
    cannot hold on one line takes two instead of being cut with "…"."""

    def __init__(self, table: QTableWidget) -> None:
        super().__init__(table)
        self.table = table

    def initStyleOption(self, option: QStyleOptionViewItem, index: Index) -> None:
        super().initStyleOption(option, index)
        option.features |= QStyleOptionViewItem.ViewItemFeature.WrapText

    def sizeHint(self, option: QStyleOptionViewItem, index: Index) -> QSize:
        """As wide as the name on one line (what a column sized to its contents takes), as
        tall as the name wrapped at the column's present width."""
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        style = self.table.style()
        opt.rect = QRect()  # no width to wrap at: one line
        one_line = style.sizeFromContents(
            QStyle.ContentsType.CT_ItemViewItem, opt, QSize(), self.table
        )
        opt.rect = QRect(0, 0, self.table.columnWidth(index.column()), 1)
        wrapped = style.sizeFromContents(
            QStyle.ContentsType.CT_ItemViewItem, opt, QSize(), self.table
        )
        return QSize(one_line.width(), max(one_line.height(), wrapped.height()))


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
        self.setItemDelegateForColumn(0, NameDelegate(self))
        # rows refitted once the header's new widths hold (they do not yet while it signals)
        self._refit = QTimer(self, singleShot=True, interval=0)
        self._refit.timeout.connect(self.fit_rows)
        header.sectionResized.connect(self._name_column_resized)

    def show_results(self, results: list[CompareResult]) -> None:
        rows = result_rows(results)
        self.setRowCount(len(rows))
        for r, (result, row) in enumerate(zip(results, rows, strict=True)):
            partial = stopped(result.summary)
            for c, text in enumerate(_cells(row, result)):
                item = QTableWidgetItem(text)
                if HEADERS[c] == "Speedup vs AR" and row["speedup_vs_ar"] is not None:
                    item.setToolTip(_speedup_tip(row))
                if partial:
                    item.setToolTip(partial_tip(result))
                    if c:
                        item.setForeground(QColor(PARTIAL))
                if c:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignCenter)
                else:
                    item.setForeground(QColor(result.color))
                    item.setData(Qt.ItemDataRole.DecorationRole, QColor(result.color))
                self.setItem(r, c, item)
        self.fit_rows()

    def fit_rows(self) -> None:
        """Rows as tall as their names wrapped at the name column's width; the table as tall
        as its rows."""
        self.resizeRowsToContents()
        self.setFixedHeight(self.fitted_height())

    def _name_column_resized(self, column: int, _old: int, _new: int) -> None:
        if column == 0 and self.rowCount():
            self._refit.start()

    def fitted_height(self) -> int:
        """Height that shows the header and every row without a scroll bar (at least 3 rows)."""
        rows = self.verticalHeader().length() if self.rowCount() >= 3 else 3 * 30
        scroll = self.horizontalScrollBar().sizeHint().height()  # room for it when it shows
        return (
            self.horizontalHeader().sizeHint().height() + rows + scroll + 2 * self.frameWidth() + 4
        )
