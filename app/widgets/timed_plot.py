"""A PlotWidget that adds up the time its paints take (the live plots' redraw throttle reads it)
and never stays wider than its view.

An axis sizes itself to its tick labels as it paints: a run whose speed is one value for a
while has ticks of many digits, and the plot grows past its view to hold them (its right side
cut off). Once the ticks are short again the plot no longer needs that width, but nothing
shrinks it back; so after a paint that finds the plot wider than its view, it is fitted to the
view again (the least width its title and axes need is kept, as Qt keeps a minimum)."""

from __future__ import annotations

import time

import pyqtgraph as pg
from PySide6.QtCore import QTimer


class TimedPlot(pg.PlotWidget):
    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.paint_seconds = 0.0  # every paint so far; the reader takes differences

    def paintEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        began = time.perf_counter()
        super().paintEvent(event)
        self.paint_seconds += time.perf_counter() - began
        if self.plotItem.geometry().width() > self.range.width():
            QTimer.singleShot(0, self.fit_view)

    def fit_view(self) -> None:
        """The plot as wide as the view again (as a resize fits it)."""
        pg.GraphicsView.setRange(self, self.range, padding=0, disableAutoPixel=False)

    def remove_runs(self, items: dict[str, pg.GraphicsObject]) -> None:
        """Take each run's item off the plot and forget it (what a reset does)."""
        for item in items.values():
            self.removeItem(item)
        items.clear()
