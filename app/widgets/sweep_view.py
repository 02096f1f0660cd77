"""Sweep view: choose a grid, run it in the background, a heatmap of speedup vs autoregressive.

Rows are temperatures, columns the draft length k (chain methods) or the tree size (tree
methods); each cell is coloured by its measured speedup and shows it as text. Clicking a cell
emits `apply_requested` with that point's settings, which the window applies to the sliders.
The view only parses, draws and words; `app/sweep_controller.py` runs the sweep.

The "Tune" row chooses what Run ▸ Tune measures: for a method with parameters of its own
(layer-skip's exit layer, SWIFT's skip ratio, lookahead's W and N) one of them, first by
default, else the draft length k (chains) or the tree size (trees).

The colour scale is absolute, the same for every sweep (`speedup_color`, drawn as the colour
bar beside the map): 1.00× (no gain) is a neutral light grey, a point slower than
autoregressive decoding is red (darker the slower, full at 0.5×), a faster one blue (darker
the faster, full at 3× and above); a point not measured yet is hatched. A 1.36× best cell
is therefore a light blue, not the darkest colour of its map. The point a Stop cut short stays
hatched and reads "stopped".
"""

from __future__ import annotations

from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QPen
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QFormLayout,
    QGraphicsRectItem,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from specdec_core.errors import SpecdecError
from specdec_core.files import format_duration
from specdec_core.measurement.sweep_records import METHOD_PREFIX, MeasuredPoint, TuneResult

PARAM_PREFIX = "policy_params."  # as specdec_core.tuning.sweep.PARAM_PREFIX (no torch import here)
PENDING = QBrush(QColor("#a0a0a0"), Qt.BrushStyle.BDiagPattern)  # hatched: not measured yet
SLOWEST, FASTEST = 0.5, 3.0  # speedups that get the full colour of their side of the scale
NEUTRAL_BAND = 0.005  # within it of 1.0 a cell reads 1.00×: no gain either way
NEUTRAL = QColor("#ececec")
SLOWER = pg.ColorMap([0.0, 1.0], ["#f4a582", "#b2182b"])  # just slower -> half as fast
FASTER = pg.ColorMap([0.0, 0.5, 1.0], ["#d1e5f0", "#4393c3", "#053061"])  # just faster -> 3×
SCALE_TICKS = ((0.5, "0.5×"), (1.0, "1×"), (1.5, "1.5×"), (2.0, "2×"), (2.5, "2.5×"), (3.0, "≥3×"))
LEGEND = (
    "colour: speedup vs autoregressive on a fixed scale — red: slower; grey: no gain (1.00×); "
    "blue: faster, darkest at 3× and above; hatched: not measured yet"
)
PROMPT_CURRENT, PROMPT_FILE = "current prompt", "JSONL file"
PARAM_WORDS = {  # a method parameter in words
    "exit_layer": "the exit layer",
    "skip_ratio": "the skip ratio",
    "window": "the lookahead window W",
    "ngram_size": "the n-gram size N",
    "block": "the DFlash block (rows per pass)",
}


def speedup_color(speedup: float) -> QColor:
    """The colour of a cell measuring `speedup` (× autoregressive), the same in every sweep."""
    if abs(speedup - 1.0) <= NEUTRAL_BAND:
        return QColor(NEUTRAL)
    if speedup < 1.0:
        share = (1.0 - NEUTRAL_BAND - speedup) / (1.0 - NEUTRAL_BAND - SLOWEST)
        return SLOWER.map(min(1.0, max(0.0, share)), mode="qcolor")
    share = (speedup - 1.0 - NEUTRAL_BAND) / (FASTEST - 1.0 - NEUTRAL_BAND)
    return FASTER.map(min(1.0, max(0.0, share)), mode="qcolor")


def scale_colormap(samples: int = 251) -> pg.ColorMap:
    """`speedup_color` from SLOWEST to FASTEST as one colour map, for the colour bar."""
    values = [SLOWEST + (FASTEST - SLOWEST) * i / (samples - 1) for i in range(samples)]
    positions = [i / (samples - 1) for i in range(samples)]
    return pg.ColorMap(positions, [speedup_color(v) for v in values])


def _value(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def setting_words(name: str, value: Any) -> str:
    """One sweep setting in words: 'temperature 0.7', '3 drafted tokens per step', 'a tree of
    16 tokens', "the policy's tau at 0.3"."""
    if name == "temperature":
        return f"temperature {_value(value)}"
    if name == "k":
        return f"{value} drafted token{'' if value == 1 else 's'} per step"
    if name == "tree_tokens":
        return "a tree sized automatically" if value is None else f"a tree of {value} tokens"
    if name.startswith(PARAM_PREFIX):
        return f"the policy's {name.removeprefix(PARAM_PREFIX)} at {_value(value)}"
    if name.startswith(METHOD_PREFIX):
        return f"{param_words(name.removeprefix(METHOD_PREFIX))} at {_value(value)}"
    return f"{name.replace('_', ' ')} {'auto' if value is None else _value(value)}"


def point_words(point: dict[str, Any]) -> str:
    """A sweep point in words, temperature first: 'temperature 0, a tree of 16 tokens'."""
    names = sorted(point, key=lambda name: name != "temperature")
    return ", ".join(setting_words(name, point[name]) for name in names)


def speedup_words(speedup: float) -> str:
    """'1.90× vs autoregressive' (a ratio of tokens per second, measured side by side)."""
    return f"{speedup:.2f}× vs autoregressive"


def result_words(
    measured: list[MeasuredPoint], method: str, stopped: dict[str, Any] | None = None
) -> str:
    """The line after a sweep: how many points, the fastest, at which settings; `method` as
    the Method box names it; `stopped`: the point a Stop cut short (left out)."""
    line = _result_words(measured, method)
    if stopped is not None:
        line += f" — Stop cut {point_words(stopped)} short; it is left out"
    return line


def _result_words(measured: list[MeasuredPoint], method: str) -> str:
    if not measured:
        return f"no point of the {method} sweep was measured"
    best = max(measured, key=lambda p: p.speedup_vs_ar)
    speedup = best.speedup_vs_ar
    count = f"{len(measured)} point{'' if len(measured) == 1 else 's'} of {method} measured"
    where = point_words(best.point)
    if speedup < 1.0 - NEUTRAL_BAND:
        return (
            f"{count}; every one is slower than autoregressive decoding, the least slow "
            f"{speedup_words(speedup)} at {where}"
        )
    if speedup <= 1.0 + NEUTRAL_BAND:
        return f"{count}; none is faster than autoregressive decoding, the best {where}"
    return f"{count}; fastest: {speedup_words(speedup)} at {where}; click a cell to use it"


def param_words(name: str) -> str:
    """A method parameter in words: 'the exit layer'."""
    return PARAM_WORDS.get(name, f"its {name.replace('_', ' ')}")


def tuned_words(tree: bool, param: str | None = None) -> str:
    """What Tune measures: a method parameter, the tree size or the draft length k."""
    if param:
        return param_words(param)
    return "the tree size" if tree else "the draft length k"


def progress_words(
    doing: str,
    done: int,
    total: int,
    measuring: dict[str, Any] | None,
    running_s: float,
    eta_s: float | None,
) -> str:
    """The line while a sweep or Tune runs: 'tuning k for Classic draft on 3 tuning prompts:
    2/6 points; measuring 3 drafted tokens per step (0m04s in); about 0m20s left'."""
    line = f"{doing}: {done}/{total} points"
    if measuring is None:
        return line
    line += f"; measuring {point_words(measuring)} ({format_duration(running_s)} in)"
    if eta_s is None:
        return f"{line}; the time left is known after the first point"
    return f"{line}; about {format_duration(eta_s)} left"


def tune_words(result: TuneResult, method: str) -> str:
    """The line after Tune: what it chose for `method` and how fast that ran, or, stopped,
    that the setting stays as it was."""
    setting, rows = result.setting, result.table
    fastest = max(rows, key=lambda row: row.speedup_vs_ar, default=None)
    if result.stopped:
        count = f"{len(rows)} measured value{'' if len(rows) == 1 else 's'}"
        line = (
            f"Tune of {method} stopped after {count}; it keeps {setting_words(setting, result.k)}"
        )
        if fastest is not None:
            line += (
                f" (the fastest measured: {setting_words(setting, fastest.k)}, "
                f"{speedup_words(fastest.speedup_vs_ar)})"
            )
        return line
    chosen = next((row for row in rows if row.k == result.k), fastest)
    if chosen is None:
        return f"Tune of {method} measured nothing"
    line = (
        f"Tune chose {setting_words(setting, chosen.k)} for {method}: "
        f"{speedup_words(chosen.speedup_vs_ar)} (τ {chosen.mean_accept_length:.2f})"
    )
    if fastest is not None and fastest is not chosen:
        line += (
            f", about as fast as {setting_words(setting, fastest.k)} "
            f"({fastest.speedup_vs_ar:.2f}×) and smaller"
        )
    if chosen.speedup_vs_ar < 1.0 - NEUTRAL_BAND:
        line += "; none was faster than autoregressive decoding on this device"
    return line


def parse_values(text: str, kind: type, name: str) -> list[Any]:
    """'1, 2,4' -> [1, 2, 4]; an empty or malformed field is a user error."""
    parts = [p.strip() for p in text.replace(";", ",").split(",") if p.strip()]
    if not parts:
        raise SpecdecError(f"give at least one value for {name} (comma-separated)")
    try:
        values = [kind(p) for p in parts]
    except ValueError:
        raise SpecdecError(f"{name}: '{text}' is not a comma-separated list of numbers") from None
    return list(dict.fromkeys(values))  # drop repeats, keep order


class SweepView(QWidget):
    run_requested = Signal()
    stop_requested = Signal()
    apply_requested = Signal(dict)  # {"temperature": t, "k" or "tree_tokens": v}

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.k_values = QLineEdit("1,2,3,4,6,8")
        self.temperatures = QLineEdit("0,0.7,1.0")
        self.tree_tokens = QLineEdit("16,32,64")
        self.thresholds = QLineEdit()
        self.thresholds.setPlaceholderText(
            "lossy policy only: e.g. 0.1,0.3,0.5 — sweeps its first parameter instead of k"
        )
        self.tune_axis = QComboBox()  # what Run ▸ Tune measures (`set_tunable`)
        self.prompt_source = QComboBox()
        self.prompt_source.addItems([PROMPT_CURRENT, PROMPT_FILE])
        self.prompt_file = QLineEdit()
        self.prompt_file.setPlaceholderText("prompts.jsonl (one {'prompt': …} per line)")
        browse = QPushButton("…")
        browse.clicked.connect(self._browse)
        self.run_button = QPushButton("Run sweep")
        self.stop_button = QPushButton("Stop")
        self.stop_button.setEnabled(False)
        self.run_button.clicked.connect(self.run_requested)
        self.stop_button.clicked.connect(self.stop_requested)
        tips = {
            self.k_values: "draft lengths to measure, comma-separated (chain methods, 0–16)",
            self.temperatures: "temperatures to measure, comma-separated (0 = greedy, 0–2)",
            self.tree_tokens: "EAGLE-2 tree sizes to measure, comma-separated (tokens, 2–256)",
            self.thresholds: "values of a lossy policy's first parameter, comma-separated",
            self.tune_axis: "what Run ▸ Tune measures for the chosen method, then sets; it "
            "measures on short tuning prompts of its own, not the Prompts row's",
            self.prompt_source: "sweep on the current prompt or on the prompts of a JSONL file",
            self.prompt_file: "a JSONL file with one {'prompt': …} or {'turns': […]} per line",
            browse: "choose the JSONL prompt file",
            self.run_button: "measure every point of the grid (speedup against ar, τ)",
            self.stop_button: "stop within one decode step; the finished points stay",
        }
        for widget, tip in tips.items():
            widget.setToolTip(tip)
        self.status = QLabel("choose a grid and press Run sweep; click a cell to apply it")
        self.status.setWordWrap(True)

        file_row = QHBoxLayout()
        file_row.addWidget(self.prompt_source)
        file_row.addWidget(self.prompt_file, 1)
        file_row.addWidget(browse)
        buttons = QHBoxLayout()
        buttons.addWidget(self.run_button)
        buttons.addWidget(self.stop_button)
        buttons.addStretch(1)
        form = QFormLayout()
        form.addRow("k values", self.k_values)
        form.addRow("Temperatures", self.temperatures)
        form.addRow("Tree sizes", self.tree_tokens)
        form.addRow("Policy thresholds", self.thresholds)
        form.addRow("Prompts", file_row)
        form.addRow("Tune", self.tune_axis)

        self.plot = pg.PlotWidget()
        self.plot.setMenuEnabled(False)
        self.plot.setMouseEnabled(x=False, y=False)
        self.plot.hideButtons()
        self.plot.setLabel("left", "temperature")
        self.plot.scene().sigMouseClicked.connect(self.on_click)
        self.colorbar = pg.ColorBarItem(
            values=(SLOWEST, FASTEST),
            colorMap=scale_colormap(),
            label="speedup vs autoregressive",
            interactive=False,
            width=14,
            colorMapMenu=False,
        )
        self.colorbar.getAxis("right").setTicks([list(SCALE_TICKS)])
        self.plot.getPlotItem().layout.addItem(self.colorbar, 2, 5)
        self.plot.getPlotItem().layout.setContentsMargins(4, 10, 4, 4)  # room for "≥3×"
        self.legend = QLabel(LEGEND)
        self.legend.setWordWrap(True)
        self.legend.setStyleSheet("color: #555")

        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addLayout(buttons)
        layout.addWidget(self.status)
        layout.addWidget(self.plot, 1)
        layout.addWidget(self.legend)

        # trade-off view of a lossy-policy threshold sweep: τ against agreement with `ar`
        self.tradeoff = pg.PlotWidget()
        self.tradeoff.setLabel("bottom", "τ (mean accepted length)")
        self.tradeoff.setLabel("left", "token agreement with ar")
        self.tradeoff.showGrid(x=True, y=True, alpha=0.3)
        self.tradeoff_points = pg.ScatterPlotItem(size=10, brush=pg.mkBrush("#c1121f"))
        self.tradeoff.addItem(self.tradeoff_points)
        self.tradeoff_labels: list[pg.TextItem] = []
        self.tradeoff.setVisible(False)
        layout.addWidget(self.tradeoff, 1)

        self.axis = "k"
        self.columns: list[Any] = []
        self.rows: list[float] = []
        self.cells: dict[tuple[int, int], QGraphicsRectItem] = {}
        self.labels: dict[tuple[int, int], pg.TextItem] = {}
        self.records: dict[tuple[int, int], MeasuredPoint] = {}

    # -- inputs ---------------------------------------------------------------------------------
    def grid_axes(self, tree: bool, param: str | None = None) -> dict[str, list[Any]]:
        """The requested grid: temperature × (policy thresholds when given for a lossy policy
        whose first parameter is `param`, else tree size for tree methods, else k)."""
        temperatures = parse_values(self.temperatures.text(), float, "temperatures")
        if self.thresholds.text().strip():
            if param is None:
                raise SpecdecError(
                    "policy thresholds need a lossy policy with a parameter; choose one in "
                    "the Decoding panel, or clear the thresholds field"
                )
            values = parse_values(self.thresholds.text(), float, "policy thresholds")
            return {"temperature": temperatures, f"{PARAM_PREFIX}{param}": values}
        if tree:
            return {"temperature": temperatures, "tree_tokens": self._ints(self.tree_tokens)}
        return {"temperature": temperatures, "k": self._ints(self.k_values)}

    def set_tunable(self, params: tuple[str, ...], tree: bool, k: bool = True) -> None:
        """Offer the method's tunable `params` (the first chosen), then its tree size (`tree`)
        or its draft length k (`k`)."""
        self.tune_axis.clear()
        for name in params:
            self.tune_axis.addItem(param_words(name), name)
        if tree or k:
            self.tune_axis.addItem(tuned_words(tree), "")
        self.tune_axis.setCurrentIndex(0)

    def tuned_param(self) -> str | None:
        """The method parameter Tune is to measure (None: k, or the tree size)."""
        return self.tune_axis.currentData() or None

    @staticmethod
    def _ints(edit: QLineEdit) -> list[int]:
        values = parse_values(edit.text(), int, "k values / tree sizes")
        if min(values) < 1:
            raise SpecdecError("k values and tree sizes must be at least 1")
        return values

    def uses_file(self) -> bool:
        return self.prompt_source.currentText() == PROMPT_FILE

    def _browse(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Prompt file", "", "JSONL (*.jsonl);;All (*)")
        if path:
            self.prompt_file.setText(path)
            self.prompt_source.setCurrentText(PROMPT_FILE)

    def set_running(self, running: bool) -> None:
        self.run_button.setEnabled(not running)
        self.stop_button.setEnabled(running)

    # -- heatmap --------------------------------------------------------------------------------
    def begin(self, axes: dict[str, list[Any]]) -> None:
        """Draw one grey cell per grid point; measured points are coloured as they arrive."""
        self.plot.clear()
        self.cells.clear()
        self.labels.clear()
        self.records.clear()
        self.tradeoff_points.clear()
        for label in self.tradeoff_labels:
            self.tradeoff.removeItem(label)
        self.tradeoff_labels.clear()
        self.axis = next(name for name in axes if name != "temperature")
        self.tradeoff.setVisible(self.axis.startswith(PARAM_PREFIX))
        self.columns = list(axes[self.axis])
        self.rows = list(axes["temperature"])
        for row in range(len(self.rows)):
            for col in range(len(self.columns)):
                rect = QGraphicsRectItem(QRectF(col, row, 1, 1))
                rect.setBrush(PENDING)
                rect.setPen(QPen(QColor("white"), 0))
                self.plot.addItem(rect)
                self.cells[(row, col)] = rect
                label = pg.TextItem("…", color="k", anchor=(0.5, 0.5))
                label.setPos(col + 0.5, row + 0.5)
                self.plot.addItem(label)
                self.labels[(row, col)] = label
        bottom = [(c + 0.5, str(v)) for c, v in enumerate(self.columns)]
        left = [(r + 0.5, f"{t:g}") for r, t in enumerate(self.rows)]
        self.plot.getAxis("bottom").setTicks([bottom])
        self.plot.getAxis("left").setTicks([left])
        self.plot.setLabel("bottom", self._axis_label())
        self.plot.setXRange(0, len(self.columns), padding=0.02)
        self.plot.setYRange(0, len(self.rows), padding=0.02)

    def _axis_label(self) -> str:
        if self.axis.startswith(PARAM_PREFIX):
            return f"policy {self.axis.removeprefix(PARAM_PREFIX)}"
        return "tree size" if self.axis == "tree_tokens" else "draft length k"

    def add_record(self, record: MeasuredPoint) -> None:
        point = record.point
        try:
            key = (self.rows.index(point["temperature"]), self.columns.index(point[self.axis]))
        except (KeyError, ValueError):
            return  # not a point of the grid on screen
        self.records[key] = record
        self._recolor()
        if self.axis.startswith(PARAM_PREFIX):
            self._redraw_tradeoff()

    def _redraw_tradeoff(self) -> None:
        rows = [
            (r.mean_accept_length, r.aggregate.token_agreement, r)
            for r in self.records.values()
            if r.aggregate.token_agreement is not None
        ]
        self.tradeoff_points.setData([x for x, _, _ in rows], [y for _, y, _ in rows])
        for label in self.tradeoff_labels:
            self.tradeoff.removeItem(label)
        self.tradeoff_labels = []
        for x, y, record in rows:
            point = record.point
            text = f"{point[self.axis]:g} @T{point['temperature']:g}"
            label = pg.TextItem(text, color="k", anchor=(0, 1))
            label.setPos(x, y)
            self.tradeoff.addItem(label)
            self.tradeoff_labels.append(label)

    def _recolor(self) -> None:
        for key, record in self.records.items():
            speedup = record.speedup_vs_ar
            color = speedup_color(speedup)
            self.cells[key].setBrush(QBrush(color))
            self.labels[key].setText(f"{speedup:.2f}x")
            self.labels[key].setColor("k" if color.lightnessF() > 0.55 else "w")

    def cell_color(self, row: int, col: int) -> QColor | None:
        """The colour a cell is painted (None while it is not measured: hatched)."""
        brush = self.cells[(row, col)].brush()
        return brush.color() if brush.style() == Qt.BrushStyle.SolidPattern else None

    def mark_stopped(self, point: dict[str, Any]) -> None:
        """The point a Stop cut short: hatched, reading "stopped"."""
        try:
            key = (self.rows.index(point["temperature"]), self.columns.index(point[self.axis]))
        except (KeyError, ValueError):
            return
        if key in self.labels and key not in self.records:
            self.labels[key].setText("stopped")

    def show_result(
        self, records: list[MeasuredPoint], method: str, stopped: dict[str, Any] | None = None
    ) -> None:
        """The line after a sweep of `method` (as the Method box names it); `stopped`: the
        point a Stop cut short."""
        self.status.setText(result_words(records, method, stopped))

    def show_tuned(self, result: TuneResult, method: str) -> None:
        """The line after Tune of `method` (as the Method box names it)."""
        self.status.setText(tune_words(result, method))

    def on_click(self, event: Any) -> None:
        position = self.plot.getViewBox().mapSceneToView(event.scenePos())
        self.click_at(position)

    def click_at(self, position: QPointF) -> None:
        col, row = int(position.x() // 1), int(position.y() // 1)
        if 0 <= row < len(self.rows) and 0 <= col < len(self.columns):
            self.select_cell(row, col)

    def select_cell(self, row: int, col: int) -> None:
        settings = {"temperature": self.rows[row], self.axis: self.columns[col]}
        record = self.records.get((row, col))
        note = speedup_words(record.speedup_vs_ar) if record else "not measured yet"
        self.status.setText(f"applied {point_words(settings)} ({note})")
        self.apply_requested.emit(settings)
