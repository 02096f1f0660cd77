"""One method's column in the comparison: coloured header, token view, the drafter's live
status line (app/widgets/drafter_status.py), summary footer."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from app.widgets.drafter_status import DrafterStatusLabel, StatusTokenView
from specdec_core.decoding.events import RunSummary


class CompareColumn(QWidget):
    def __init__(self, method: str, label: str, color: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.method = method
        self.color = color
        self.header = QLabel(label)
        self.header.setStyleSheet(
            f"QLabel {{ color: white; background: {color}; font-weight: bold; padding: 3px 6px; }}"
        )
        self.status = DrafterStatusLabel()
        self.view = StatusTokenView(self.status)
        font = self.view.font()
        font.setPointSize(10)  # several columns share the width
        self.view.setFont(font)
        self.footer = QLabel("running…")
        self.footer.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.header)
        layout.addWidget(self.view, 1)
        layout.addWidget(self.status)
        layout.addWidget(self.footer)

    def finish(self, summary: RunSummary) -> None:
        cut = summary.stop_reason == "stopped"
        self.footer.setText(
            f"{summary.new_tokens} tokens{' (stopped)' if cut else ''} · "
            f"τ {summary.mean_accept_length:.2f} · {summary.tokens_per_second:.1f} tok/s"
        )
        self.footer.setToolTip("Stop cut this run short: a partial run" if cut else "")

    def fail(self, message: str) -> None:
        self.footer.setText(f"failed: {message}")
        self.footer.setToolTip(message)
        self.footer.setStyleSheet("QLabel { color: #c1121f; }")
