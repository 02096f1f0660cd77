"""Tokens per second over engine time (cumulative tokens ÷ cumulative seconds), one line per run.

The speed axis spans at least a fifth of the fastest speed shown (`MIN_SPAN`): a run at one
steady speed (autoregressive decoding) would otherwise zoom in to a sliver around it, with
ticks of a dozen digits ("90.9090909090911") that widen the axis past the pane."""

from __future__ import annotations

import pyqtgraph as pg

from app.plot_data import Series
from app.widgets.plot_style import style_plot
from app.widgets.timed_plot import TimedPlot

MIN_SPAN = 0.2  # of the fastest speed shown: the least the speed axis spans


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
        top = max((max(s.tps) for s in series if s.tps), default=0.0)
        if top > 0:
            self.getViewBox().setLimits(minYRange=MIN_SPAN * top)
