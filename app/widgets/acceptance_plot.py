"""Acceptance length per step (points) and its running mean τ (line), one pair per run."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtGui import QColor

from app.plot_data import Series
from app.widgets.plot_style import style_plot
from app.widgets.timed_plot import TimedPlot


class AcceptancePlot(TimedPlot):
    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        style_plot(self, "Tokens per step (line: mean τ)", "step", "tokens / step")
        self.getViewBox().setLimits(yMin=0)  # no negative token counts below the data
        self.items: dict[str, tuple[pg.PlotDataItem, pg.PlotDataItem]] = {}

    def reset(self) -> None:
        for points, mean in self.items.values():
            self.removeItem(points)
            self.removeItem(mean)
        self.items.clear()

    def sync(self, series: list[Series]) -> None:
        for s in series:
            if s.name not in self.items:
                faint = QColor(s.color)
                faint.setAlpha(110)
                points = self.plot(
                    pen=None, symbol="o", symbolSize=5, symbolBrush=faint, symbolPen=None
                )
                mean = self.plot(pen=pg.mkPen(s.color, width=2.5))
                self.items[s.name] = (points, mean)
            points, mean = self.items[s.name]
            points.setData(s.steps, s.accept)
            mean.setData(s.steps, s.mean)
