"""τ against distance, one point per run: what a lossy policy buys and what it costs.

Each finished run is a point: its τ (new tokens per target forward) against its distance from
the target's distribution (total variation per token,
`specdec_core.measurement.run_distance`). A lossless run sits at distance 0 by construction
(grey); a lossy run (red) needs its measured distance,
and one that arrives without it is counted under the plot instead of drawn.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyqtgraph as pg
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from app.widgets.plot_style import style_plot
from specdec_core.decoding.events import RunSummary
from specdec_core.measurement.run_distance import RunDistance

LOSSLESS_COLOR = "#8d99ae"
LOSSY_COLOR = "#c1121f"


@dataclass(frozen=True)
class PolicyPoint:
    """One run on the plot."""

    policy: str
    lossy: bool
    tau: float
    total_variation: float


class PolicyPlot(QWidget):
    """The scatter and a line under it saying what is and is not drawn."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.plot = pg.PlotWidget()
        style_plot(
            self.plot,
            "τ against distance, one point per run",
            "total variation / token",
            "τ",
            title_size="9pt",
        )
        self.plot.getViewBox().setLimits(xMin=0, yMin=0)
        self.plot.setMinimumHeight(150)
        self.lossless = self.plot.plot(
            pen=None, symbol="o", symbolSize=7, symbolBrush=LOSSLESS_COLOR, symbolPen=None
        )
        self.lossy = self.plot.plot(
            pen=None, symbol="o", symbolSize=7, symbolBrush=LOSSY_COLOR, symbolPen=None
        )
        self.caption = QLabel()
        self.caption.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.plot)
        layout.addWidget(self.caption)
        self.points: list[PolicyPoint] = []
        self.unmeasured = 0  # lossy runs that came without a distance
        self._show()

    def add_run(self, summary: RunSummary, distance: RunDistance | None = None) -> None:
        """A finished run: drawn at (its distance, its τ), or counted when a lossy run comes
        without a measured distance (a lossless one is at 0 by construction)."""
        if summary.steps == 0:
            return  # nothing decoded: no τ
        if not summary.lossy:
            distance = RunDistance.lossless()
        tv = distance.total_variation if distance is not None else None
        if tv is None:
            self.unmeasured += 1
        else:
            self.points.append(
                PolicyPoint(summary.policy, summary.lossy, summary.mean_accept_length, tv)
            )
        self._show()

    def clear(self) -> None:
        self.points.clear()
        self.unmeasured = 0
        self._show()

    def _show(self) -> None:
        for item, lossy in ((self.lossless, False), (self.lossy, True)):
            mine = [p for p in self.points if p.lossy == lossy]
            item.setData([p.total_variation for p in mine], [p.tau for p in mine])
        drawn = len(self.points)
        text = f"{drawn} run(s): grey lossless (distance 0), red lossy"
        if self.unmeasured:
            text += f"; {self.unmeasured} lossy run(s) without a measured distance, not drawn"
        self.caption.setText(text)
