"""A PlotWidget that adds up the time its paints take (the live plots' redraw throttle reads it)."""

from __future__ import annotations

import time

import pyqtgraph as pg


class TimedPlot(pg.PlotWidget):
    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.paint_seconds = 0.0  # every paint so far; the reader takes differences

    def paintEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        began = time.perf_counter()
        super().paintEvent(event)
        self.paint_seconds += time.perf_counter() - began

    def remove_runs(self, items: dict[str, pg.GraphicsObject]) -> None:
        """Take each run's item off the plot and forget it (what a reset does)."""
        for item in items.values():
            self.removeItem(item)
        items.clear()
