"""The four live plots; step data accumulates per run and redraws are throttled.

The window shares the CPU with the engine, and painting the plots is most of what it adds (the
axes' text and grids most of all). A redraw updates the four plots at once; the next one waits
at least a second and at least 20 times as long as the last one took, painting included, so
redrawing takes at most 5 % of one core on any machine; the final redraw at the end of a run
shows every step. Measured (window against headless, 4 Hz before, this after):
docs/benchmarks.md, "The window against a headless run".
"""

from __future__ import annotations

import html
import math
import time
from collections.abc import Callable

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QGraphicsItem, QLabel, QVBoxLayout, QWidget
from superqt.utils import qthrottled

from app.plot_data import Series
from app.widgets.acceptance_plot import AcceptancePlot
from app.widgets.position_plot import PositionPlot
from app.widgets.speed_plot import SpeedPlot
from app.widgets.tree_plot import TreePlot
from specdec_core.decoding.events import Step

REDRAW_MS = 1000  # the shortest interval between redraws during a run
PAINT_SHARE = 0.05  # of one core, at most, for redrawing the plots
# each plot's least height: four plots and a key of every method (eight lines) fit 800 pixels
PLOT_HEIGHT = 124


class PlotsPanel(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        pg.setConfigOptions(antialias=True, background="w", foreground="#333")
        super().__init__(parent)
        self.acceptance = AcceptancePlot()
        self.speed = SpeedPlot()
        self.positions = PositionPlot()
        self.tree = TreePlot()
        self.key = QLabel("")  # one colour per run, shared by all plots
        self.key.setContentsMargins(6, 2, 6, 2)
        self.key.setWordWrap(True)  # many runs wrap instead of widening the window
        self.plots = (self.acceptance, self.speed, self.positions, self.tree)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.key)
        for plot in self.plots:
            plot.setMinimumHeight(PLOT_HEIGHT)
            fit_width(plot)
            cache_axes(plot)
            layout.addWidget(plot)
        self.series: dict[str, Series] = {}
        self.redraws = 0
        self.redraw_seconds = 0.0  # the last redraw's: updating the plots and painting them
        self._painted = 0.0  # the plots' paint seconds up to the last redraw
        self.request_redraw = qthrottled(self.redraw, timeout=REDRAW_MS, leading=False, parent=self)

    def set_labeler(self, labeler: Callable[[int], str]) -> None:
        self.tree.labeler = labeler

    def reset(self) -> None:
        self.series.clear()
        self.key.setText("")
        for plot in self.plots:
            plot.reset()

    def begin_series(self, name: str, color: str) -> None:
        self.series[name] = Series(name, color)
        self.key.setText(
            "&nbsp;&nbsp; ".join(
                f'<span style="color:{s.color}; font-size:12pt">■</span>&nbsp;{_nbsp(s.name)}'
                for s in self.series.values()
            )
        )

    def add_step(self, name: str, step: Step) -> None:
        self.series[name].add_step(step)
        self.request_redraw()

    def redraw(self) -> None:
        began = time.perf_counter()
        series = list(self.series.values())
        self.acceptance.sync(series)
        self.speed.sync(series)
        self.positions.sync(series)
        trees = [s.last_tree for s in series if s.last_tree is not None]  # not the reference's
        self.tree.show_tree(trees[-1] if trees else None)
        painted = sum(plot.paint_seconds for plot in self.plots)  # the last redraw's paints
        self.redraws += 1
        self.redraw_seconds = time.perf_counter() - began + painted - self._painted
        self._painted = painted
        wait = max(REDRAW_MS, math.ceil(1000 * self.redraw_seconds / PAINT_SHARE))
        self.request_redraw.setTimeout(wait)


def fit_width(plot: pg.PlotWidget) -> None:
    """Never narrower than its plot (title, axes) needs: a splitter then gives the plot its
    width instead of cutting its right side off."""
    need = plot.plotItem.effectiveSizeHint(Qt.SizeHint.MinimumSize).width()
    plot.setMinimumWidth(math.ceil(need) + 2 * plot.frameWidth() + 2)


def cache_axes(plot: pg.PlotWidget) -> None:
    """Paint each axis from a pixmap until its ticks change: a redraw that only moves a curve
    then does not draw the axes' text again (drawing text is most of a plot's paint)."""
    for axis in plot.plotItem.axes.values():
        axis["item"].setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)


def _nbsp(text: str) -> str:
    """Keep a run's name on one line when the key wraps."""
    return html.escape(text).replace(" ", "&nbsp;").replace("-", "&#8209;")  # no-break hyphen
