"""What the Server tab draws, accumulated from `Interval` records (no Qt).

- τ per interval and tokens/s per interval, against seconds since Start;
- acceptance by draft position over everything seen since Start (or the server's last
  restart): Σ accepted at position i ÷ Σ drafts, as a `Series` the position plot draws, beside
  the playground's last run (`RunSummary.accepted_per_position` / `drafted_per_position`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.plot_data import Series
from specdec_core.decoding.events import RunSummary
from specdec_core.serving.server_metrics import Interval

Points = tuple[list[float], list[float]]


@dataclass
class ServerTrace:
    color: str
    tau: Points = field(default_factory=lambda: ([], []))
    accepted: Points = field(default_factory=lambda: ([], []))
    generated: Points = field(default_factory=lambda: ([], []))
    positions: Series | None = None  # vLLM only: SGLang reports no per-position numbers
    engine: str = ""
    model: str = ""
    intervals: int = 0

    def add(self, interval: Interval) -> None:
        self.engine, self.model = interval.engine, interval.model
        self.intervals += 1
        t = interval.elapsed
        for points, value in (
            (self.tau, interval.tau),
            (self.accepted, interval.accepted_tokens_per_second),
            (self.generated, interval.generated_tokens_per_second),
        ):
            if value is not None:
                points[0].append(t)
                points[1].append(value)
        if interval.position_rates and interval.drafts > 0:
            if self.positions is None:
                self.positions = Series(self.label(), self.color)
            drafts = round(interval.drafts)
            accepted = [round(rate * interval.drafts) for rate in interval.position_rates]
            _add(self.positions.accepted_at, accepted)
            _add(self.positions.drafted_at, [drafts] * len(accepted))

    def restarted(self) -> None:
        """The server restarted: per-position totals start again (the time lines go on)."""
        self.positions = None

    def label(self) -> str:
        model = f" · {self.model}" if self.model else ""
        return f"server ({self.engine}{model})" if self.engine else "server"


def playground_series(summary: RunSummary, color: str) -> Series:
    """The playground's last run as a position-plot series, named by its method and τ."""
    series = Series(playground_label(summary), color)
    series.accepted_at = list(summary.accepted_per_position)
    series.drafted_at = list(summary.drafted_per_position)
    return series


def playground_label(summary: RunSummary) -> str:
    return f"playground ({summary.method}) τ {summary.mean_accept_length:.2f}"


def _add(totals: list[int], values: list[int]) -> None:
    totals.extend([0] * max(0, len(values) - len(totals)))
    for i, value in enumerate(values):
        totals[i] += value
