"""Acceptance rate per draft position: grouped bars, one colour per run."""

from __future__ import annotations

import pyqtgraph as pg

from app.plot_data import Series
from app.widgets.plot_style import style_plot
from app.widgets.timed_plot import TimedPlot

GROUP_WIDTH = 0.8


class PositionPlot(TimedPlot):
    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        style_plot(
            self,
            "Acceptance rate by draft position",
            "draft position",
            "accepted / drafted",
            x_grid=False,
        )
        self.getAxis("bottom").setTickSpacing(1, 1)
        self.setYRange(0.0, 1.05, padding=0)
        self.items: dict[str, pg.BarGraphItem] = {}

    def reset(self) -> None:
        self.remove_runs(self.items)

    def sync(self, series: list[Series]) -> None:
        drafting = [s for s in series if s.drafted_at]
        width = GROUP_WIDTH / max(1, len(drafting))
        for index, s in enumerate(drafting):
            if s.name not in self.items:
                item = pg.BarGraphItem(x=[], height=[], width=width, brush=s.color, pen=None)
                self.addItem(item)
                self.items[s.name] = item
            rates = s.position_rates()
            offset = -GROUP_WIDTH / 2 + width * (index + 0.5)
            x = [i + 1 + offset for i in range(len(rates))]
            self.items[s.name].setOpts(x=x, height=rates, width=width)
        if drafting:
            self.setXRange(0.4, max(len(s.drafted_at) for s in drafting) + 0.6, padding=0)
