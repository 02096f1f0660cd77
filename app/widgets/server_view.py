"""Server tab: follow a vLLM / SGLang server's speculative decoding live, beside the
playground's own last run.

A URL and a polling period, Start / Stop, one status line (which says so when the server is
unreachable and polling goes on: no dialogs), a colour key, and three plots: τ per interval
(the playground's τ as a dashed level), acceptance by draft position (server since Start vs
the playground run) and tokens/s. The view only draws; `app/server_controller.py` polls.
"""

from __future__ import annotations

import html

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QDoubleSpinBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.palette import REFERENCE_COLOR
from app.server_trace import ServerTrace, playground_label, playground_series
from app.widgets.server_plots import (
    SERVER_COLOR,
    ServerPositionPlot,
    ServerSpeedPlot,
    TauTimePlot,
)
from specdec_core.decoding.events import RunSummary
from specdec_core.serving.server_metrics import Interval


class ServerView(QWidget):
    start_requested = Signal()
    stop_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.url = QLineEdit()
        self.url.setPlaceholderText(
            "http://localhost:8000 (vLLM) or http://localhost:30000 (SGLang)"
        )
        self.period = QDoubleSpinBox()
        self.period.setRange(0.2, 600.0)
        self.period.setValue(2.0)
        self.period.setSuffix(" s")
        self.start_button = QPushButton("Start")
        self.stop_button = QPushButton("Stop")
        self.stop_button.setEnabled(False)
        self.url.setToolTip("the vLLM or SGLang server's base URL; /metrics is read from it")
        self.period.setToolTip("seconds between polls of the server's metrics (0.2–600)")
        self.start_button.setToolTip("poll the server and draw its speculative metrics")
        self.stop_button.setToolTip("stop polling (the plots stay)")
        self.start_button.clicked.connect(self.start_requested)
        self.stop_button.clicked.connect(self.stop_requested)
        self.status = QLabel(
            "start a server with File ▸ Export to server…, give its URL and press Start"
        )
        self.status.setWordWrap(True)
        self.key = QLabel("")
        self.key.setWordWrap(True)
        self.tau_plot = TauTimePlot()
        self.positions = ServerPositionPlot()
        self.speed = ServerSpeedPlot()

        row = QHBoxLayout()
        row.addWidget(QLabel("Server"))
        row.addWidget(self.url, 1)
        row.addWidget(QLabel("every"))
        row.addWidget(self.period)
        row.addWidget(self.start_button)
        row.addWidget(self.stop_button)
        layout = QVBoxLayout(self)
        layout.addLayout(row)
        layout.addWidget(self.status)
        layout.addWidget(self.key)
        for plot in (self.tau_plot, self.positions, self.speed):
            plot.setMinimumHeight(150)
            layout.addWidget(plot, 1)
        self.trace = ServerTrace(SERVER_COLOR)
        self.playground: RunSummary | None = None
        self.playground_color = REFERENCE_COLOR

    def set_running(self, running: bool) -> None:
        self.start_button.setEnabled(not running)
        self.stop_button.setEnabled(running)
        self.url.setEnabled(not running)
        self.period.setEnabled(not running)

    def begin(self) -> None:
        """A new watch: the server's lines start empty."""
        self.trace = ServerTrace(SERVER_COLOR)
        self.redraw()

    def add_interval(self, interval: Interval) -> None:
        self.trace.add(interval)
        self.redraw()

    def restarted(self) -> None:
        self.trace.restarted()
        self.redraw()

    def set_playground(self, summary: RunSummary | None, color: str = REFERENCE_COLOR) -> None:
        """The playground run to compare with, drawn in its method's colour."""
        self.playground, self.playground_color = summary, color
        self.redraw()

    def redraw(self) -> None:
        trace, summary, color = self.trace, self.playground, self.playground_color
        self.tau_plot.set_data(trace.tau)
        self.tau_plot.set_playground(summary.mean_accept_length if summary else None, color)
        series = [s for s in (trace.positions,) if s is not None]
        if summary is not None and summary.drafted_per_position:
            series.append(playground_series(summary, color))
        self.positions.redraw(series)
        self.speed.set_data(trace.accepted, trace.generated)
        entries = [(SERVER_COLOR, trace.label())]
        if summary is not None:
            entries.append((color, playground_label(summary)))
        self.key.setText(
            "&nbsp;&nbsp; ".join(
                f'<span style="color:{color}; font-size:14pt">■</span>&nbsp;{html.escape(text)}'
                for color, text in entries
            )
        )
