"""The Server tab's plots, in the style of the live plots: τ over time and tokens/s over time
(one line per source), with the playground's own τ as a dashed level for comparison.
Acceptance by draft position reuses `PositionPlot` (app/widgets/position_plot.py)."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor

from app.plot_data import Series
from app.widgets.plot_style import style_plot
from app.widgets.position_plot import PositionPlot

Points = tuple[list[float], list[float]]  # x (seconds since Start), y

SERVER_COLOR = "#332288"  # indigo (Tol): apart from the methods' Okabe-Ito colours


def _style(plot: pg.PlotWidget, title: str, left: str) -> None:
    style_plot(plot, title, "time since Start (s)", left, si_prefix=False)


class TauTimePlot(pg.PlotWidget):
    """The server's τ per interval (points and line); the playground's τ as a dashed level."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        _style(
            self, "Server τ per interval · dashed: the playground's last run", "τ (tokens / step)"
        )
        faint = QColor(SERVER_COLOR)
        faint.setAlpha(110)
        self.line = self.plot(
            pen=pg.mkPen(SERVER_COLOR, width=2.5), symbol="o", symbolSize=5,
            symbolBrush=faint, symbolPen=None,
        )  # fmt: skip
        self.level = pg.InfiniteLine(angle=0)
        self.level.setVisible(False)
        self.addItem(self.level)

    def set_data(self, tau: Points) -> None:
        self.line.setData(*tau)

    def set_playground(self, tau: float | None, color: str) -> None:
        """The playground run's τ as a dashed level in its method's colour (None: hidden)."""
        self.level.setVisible(tau is not None)
        if tau is not None:
            self.level.setPen(pg.mkPen(color, width=2, style=Qt.PenStyle.DashLine))
            self.level.setValue(tau)


class ServerSpeedPlot(pg.PlotWidget):
    """Accepted draft tokens per second (solid) and generated tokens per second (faint)."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        _style(
            self,
            "Server tokens per second · solid: accepted drafts, faint: generated",
            "tokens / s",
        )
        faint = QColor(SERVER_COLOR)
        faint.setAlpha(90)
        self.accepted = self.plot(pen=pg.mkPen(SERVER_COLOR, width=2.5))
        self.generated = self.plot(pen=pg.mkPen(faint, width=2))

    def set_data(self, accepted: Points, generated: Points) -> None:
        self.accepted.setData(*accepted)
        self.generated.setData(*generated)


class ServerPositionPlot(PositionPlot):
    """Acceptance by draft position: the server since Start (or its last restart) beside the
    playground's last run."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setTitle(
            "Acceptance by draft position · server since Start, playground run", size="10pt"
        )

    def redraw(self, series: list[Series]) -> None:
        self.reset()
        self.sync(series)
