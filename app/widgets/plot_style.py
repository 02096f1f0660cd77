"""The look every plot of the window shares: a title, both axes labelled, a faint grid, and no
panning or zooming with the mouse (the plots follow their data)."""

from __future__ import annotations

import pyqtgraph as pg


def style_plot(
    plot: pg.PlotWidget,
    title: str,
    bottom: str,
    left: str,
    *,
    title_size: str = "10pt",
    x_grid: bool = True,
    si_prefix: bool = True,
) -> None:
    """Title `plot`, label its `bottom` and `left` axes and grid it; `x_grid=False`: horizontal
    grid lines only; `si_prefix=False`: the axes show plain numbers (no k or m scaling)."""
    plot.setTitle(title, size=title_size)
    plot.setLabel("bottom", bottom)
    plot.setLabel("left", left)
    if not si_prefix:
        plot.getAxis("bottom").enableAutoSIPrefix(False)
        plot.getAxis("left").enableAutoSIPrefix(False)
    plot.showGrid(x=x_grid, y=True, alpha=0.25)
    plot.setMouseEnabled(x=False, y=False)
