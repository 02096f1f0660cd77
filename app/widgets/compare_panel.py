"""Compare tab: pick methods, run them one after another, see columns and the table, export.

The table fits the tab of a 1280-pixel window without scrolling sideways: the numbers keep
their width (the longer headers on two lines), the method's name takes what they leave and
wraps onto a second line where it must (whole in its tooltip too; its colour swatch stays),
and the Policy column shows only when some run is lossy (the Method header then says "all
lossless"). The columns keep COLUMN_LINES lines of text in view whatever the number of
methods: when the check boxes, the columns and the table together are taller than the tab,
the tab scrolls up and down (the table still shows every row).

A Compare that Stop ended says so above the table (`show_stopped`): which method it cut short
(its row reads "stopped") and which it never ran."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMenu,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from app.engine_api import Registries
from app.export import CompareResult
from app.widgets.compare_columns import CompareColumns
from app.widgets.compare_table import HEADERS, CompareTable, partial_tip
from app.widgets.flow_layout import FlowLayout
from app.widgets.legend import Legend

TWO_LINES = {"Speedup vs AR": "Speedup\nvs AR", "Identical to AR": "Identical\nto AR"}
POLICY = HEADERS.index("Policy")
COLUMN_LINES = 6  # lines of a column's text that stay in view
ALL_LOSSLESS = "Method\n(all lossless)"


def fit_table(table: CompareTable) -> None:
    """Headers on two lines where they are longer than their cells; the name column takes
    the width the numbers leave (a longer name wraps) instead of the last column."""
    header = table.horizontalHeader()
    metrics = header.fontMetrics()
    for column, text in enumerate(HEADERS):
        if text in TWO_LINES:
            table.horizontalHeaderItem(column).setText(TWO_LINES[text])
        if text == "Identical to AR":  # its cells ("yes") are narrower than its header
            lines = TWO_LINES[text].splitlines()
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.Fixed)
            width = max(map(metrics.horizontalAdvance, lines))
            header.resizeSection(column, max(width + 28, header.sectionSizeHint(column)))
    header.setStretchLastSection(False)
    header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
    header.setTextElideMode(Qt.TextElideMode.ElideNone)  # it would elide two lines as one
    table.setTextElideMode(Qt.TextElideMode.ElideRight)


class ComparePanel(QWidget):
    run_requested = Signal()
    export_requested = Signal(str)  # "csv" | "json" | "png"

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.checks: dict[str, QCheckBox] = {}
        self._wanted: list[str] = []
        self.results: list[CompareResult] = []
        self._checks_row = FlowLayout()  # wraps: every method's label fits a 1280-pixel screen
        self.run_button = QPushButton("Run comparison")
        self.run_button.setToolTip("Run the checked methods on the prompt (Ctrl+Shift+Return)")
        self.run_button.clicked.connect(self.run_requested)
        top = QHBoxLayout()
        top.addWidget(QLabel("Methods:"), 0, Qt.AlignmentFlag.AlignTop)
        top.addLayout(self._checks_row, 1)
        top.addWidget(self.run_button, 0, Qt.AlignmentFlag.AlignTop)
        second = QHBoxLayout()
        second.addWidget(Legend(), 1)
        self.export_button = QPushButton("Export")
        self.export_button.setToolTip("Export the comparison as CSV, JSON or PNG")
        self.export_button.setEnabled(False)
        menu = QMenu(self.export_button)
        for kind in ("csv", "json", "png"):
            action = menu.addAction(f"{kind.upper()}…")
            action.triggered.connect(lambda _=False, k=kind: self.export_requested.emit(k))
        self.export_button.setMenu(menu)
        second.addWidget(self.export_button)
        self.columns = CompareColumns()
        self.table = CompareTable()
        fit_table(self.table)
        self._show_policy(False)
        self.table.setFixedHeight(self.table.fitted_height())
        lines = self.columns.fontMetrics().lineSpacing() * COLUMN_LINES
        self.columns.setMinimumHeight(lines + 4 * self.fontMetrics().height())  # + header, status
        body = QWidget()
        layout = QVBoxLayout(body)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(top)
        layout.addLayout(second)
        layout.addWidget(self.columns, 1)
        self.stopped_note = QLabel("")  # a Compare Stop ended: what is partial, what never ran
        self.stopped_note.setWordWrap(True)
        self.stopped_note.setStyleSheet("QLabel { color: #c1121f; }")
        self.stopped_note.setVisible(False)
        layout.addWidget(self.stopped_note)
        layout.addWidget(self.table)
        self.scroll = QScrollArea()  # up and down only: the columns scroll sideways themselves
        self.scroll.setWidget(body)
        self.scroll.setWidgetResizable(True)
        self.scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(self.scroll)

    def minimumSizeHint(self) -> QSize:
        """As wide as what it holds needs (the tab scrolls up and down only), as low as the
        scroll area lets it be."""
        hint = super().minimumSizeHint()
        bar = self.scroll.verticalScrollBar().sizeHint().width()  # room for it when it shows
        width = self.scroll.widget().minimumSizeHint().width() + bar
        return QSize(max(hint.width(), width), hint.height())

    def set_registries(self, registries: Registries) -> None:
        """A check box per method; what was checked stays checked (a restarted engine)."""
        if self.checks:
            self._wanted = self.chosen()
        for check in self.checks.values():
            self._checks_row.removeWidget(check)
            check.deleteLater()
        self.checks.clear()
        for info in registries.methods:
            check = QCheckBox(info.label)  # as the Method box names it
            check.setToolTip(f"{info.name} on the command line")
            if info.name == "ar":
                check.setChecked(True)
                check.setEnabled(False)
                check.setToolTip("autoregressive always runs: it is the reference")
            else:
                check.setChecked(info.name in self._wanted)
            self.checks[info.name] = check
            self._checks_row.addWidget(check)

    def selected(self) -> list[str]:
        """Methods to run, autoregressive first (the reference for speedup and identity)."""
        chosen = [name for name, check in self.checks.items() if check.isChecked()]
        return ["ar", *[m for m in chosen if m != "ar"]]

    def chosen(self) -> list[str]:
        """Checked methods besides autoregressive (the saved choice until the engine is up)."""
        if not self.checks:
            return list(self._wanted)
        return [m for m in self.selected() if m != "ar"]

    def set_selected(self, methods: list[str]) -> None:
        self._wanted = list(methods)
        for name, check in self.checks.items():
            if name != "ar":
                check.setChecked(name in self._wanted)

    def begin(self) -> None:
        self.stopped_note.setVisible(False)
        self.results.clear()
        self.columns.clear()
        self.table.show_results([])
        self._show_policy(False)
        self.export_button.setEnabled(False)

    def add_result(self, result: CompareResult) -> None:
        self.results.append(result)
        self.columns.columns[result.method].finish(result.summary)
        self.table.show_results(self.results)
        for row, shown in enumerate(self.results):  # the whole name on hover too
            partial = shown.summary.stop_reason == "stopped"
            tip = f"{shown.label}: {partial_tip(shown)}" if partial else shown.label
            self.table.item(row, 0).setToolTip(tip)
        self._show_policy(any(shown.summary.lossy for shown in self.results))
        self.export_button.setEnabled(True)

    def show_stopped(self, cut: str | None, not_run: list[str]) -> None:
        """Stop ended this Compare: `cut` (a label) was cut short, `not_run` never ran."""
        parts = [f"{cut} was cut short (its row reads “(stopped)”)"] if cut else []
        if not_run:
            parts.append(f"{', '.join(not_run)} did not run")
        self.stopped_note.setText(f"Compare stopped: {'; '.join(parts) or 'nothing ran'}")
        self.stopped_note.setVisible(True)

    def _show_policy(self, shown: bool) -> None:
        """The Policy column only when some run is lossy; else the Method header says so."""
        self.table.setColumnHidden(POLICY, not shown)
        self.table.horizontalHeaderItem(0).setText(HEADERS[0] if shown else ALL_LOSSLESS)

    def fail(self, method: str, message: str) -> None:
        column = self.columns.columns.get(method)
        if column is not None:
            column.fail(message)

    def set_busy(self, busy: bool) -> None:
        self.run_button.setEnabled(not busy)
