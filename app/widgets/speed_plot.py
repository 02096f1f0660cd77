"""Tokens per second over engine time (cumulative tokens ÷ cumulative seconds), one line per run."""

from __future__ import annotations

import pyqtgraph as pg

from app.plot_data import Series
from app.widgets.plot_style import style_plot
from app.widgets.timed_plot import TimedPlot


class SpeedPlot(TimedPlot):
    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        style_plot(
            self, "Tokens per second over time", "engine time (s)", "tokens / s", si_prefix=False
        )
        self.getViewBox().setLimits(yMin=0)  # no negative speeds below the data
        self.items: dict[str, pg.PlotDataItem] = {}

    def reset(self) -> None:
        self.remove_runs(self.items)

    def sync(self, series: list[Series]) -> None:
        for s in series:
            if s.name not in self.items:
                self.items[s.name] = self.plot(pen=pg.mkPen(s.color, width=2.5))
            self.items[s.name].setData(s.time, s.tps)
