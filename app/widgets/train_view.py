"""The Train tab: the target, the data mix and budget, the layout and a time budget; Start,
Stop and Resume; progress of generation and training; validation per epoch, plotted.

The progress lines wrap (however long a line gets, the tab never widens the window past a
1280-pixel screen); the plot's axis says only "top-1, τ" and its legend sits above it, outside
the data, so neither is clipped nor hidden behind a curve at 1280×800."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.training_plan import LAYOUTS, SOURCES, KindValidation
from app.widgets.flow_layout import FlowLayout
from app.widgets.plot_style import style_plot
from specdec_core.training.progress_file import EpochValidation

TOP1_COLOR, TAU_COLOR = "#1f77b4", "#d62728"
PLOT_MIN_HEIGHT = 150  # readable: a few grid lines and both curves
LEGEND = (
    f'<span style="color:{TOP1_COLOR}">●</span> top-1: teacher-forced agreement with the '
    f'target &nbsp;&nbsp; <span style="color:{TAU_COLOR}">■</span> τ: mean accepted length'
)


class TrainView(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.target = QLabel("no target loaded")
        self.target.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.sources: dict[str, QCheckBox] = {}
        mix = FlowLayout()
        for source in SOURCES:
            box = QCheckBox(source)
            box.setChecked(True)
            box.setToolTip(f"generate answers of the target to {source} requests")
            self.sources[source] = box
            mix.addWidget(box)
        self.tokens = QSpinBox()
        self.tokens.setRange(1, 1_000_000)
        self.tokens.setValue(1000)
        self.tokens.setSuffix("k answer tokens")
        self.tokens.setToolTip("answer tokens to generate over the checked sources (thousands)")
        self.layout_box = QComboBox()
        self.layout_box.addItems(LAYOUTS)
        self.layout_box.setToolTip(
            "eagle1: predicts the target's next feature; eagle3: reads three target layers"
        )
        self.minutes = QDoubleSpinBox()
        self.minutes.setRange(0, 24 * 60)
        self.minutes.setDecimals(1)
        self.minutes.setSuffix(" min")
        self.minutes.setSpecialValueText("no limit")
        self.minutes.setToolTip(
            "one time budget for each Start or Resume: generation takes at most half, training "
            "(with its features) the rest; 0: no limit, the token budget and epochs decide"
        )
        self.start_button = QPushButton("Start")
        self.start_button.setToolTip("generate the data, then train the head (children)")
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("end the child; Resume continues from the work folder")
        self.resume_button = QPushButton("Resume")
        self.resume_button.setToolTip("start again on the same work folder, where it stopped")
        self.compare_button = QPushButton("Compare with the new head")
        self.compare_button.setToolTip(
            "select the new head and run Compare; the head it replaces stays in the Head list"
        )
        self.why_button = QPushButton("Why this τ?")
        self.why_button.setToolTip(
            "the evidence for the new head's τ and what to do (specdec validate --why): top-1 "
            "by draft position, the target's own answers against a dataset's, draft-vocabulary "
            "coverage, by kind against the data's share"
        )
        buttons = QHBoxLayout()
        for button in (self.start_button, self.stop_button, self.resume_button):
            buttons.addWidget(button)
        buttons.addStretch(1)
        buttons.addWidget(self.compare_button)

        target_row = QHBoxLayout()  # rows kept few: the plot needs the height at 1280×800
        target_row.addWidget(self.target, 1)
        target_row.addWidget(QLabel("Layout"))
        target_row.addWidget(self.layout_box)
        budgets = QHBoxLayout()
        budgets.addWidget(self.tokens, 1)
        budgets.addWidget(QLabel("Time budget"))
        budgets.addWidget(self.minutes, 1)
        form = QFormLayout()
        form.addRow("Target", target_row)
        form.addRow("Data mix", mix)
        form.addRow("Token budget", budgets)
        settings = QGroupBox("Train an EAGLE head for the loaded target")
        settings_layout = QVBoxLayout(settings)
        settings_layout.addLayout(form)
        settings_layout.addLayout(buttons)

        self.work = QLabel("")
        self.work.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        # a long path is cut at the tab's edge (whole in the tooltip), never widening the window
        self.work.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.generation_bar, self.generation_text = QProgressBar(), QLabel("not started")
        self.training_bar, self.training_text = QProgressBar(), QLabel("not started")
        for bar in (self.generation_bar, self.training_bar):
            bar.setRange(0, 1000)
            bar.setValue(0)
        for line in (self.generation_text, self.training_text):
            line.setWordWrap(True)
        self.state = QLabel("")
        self.state.setWordWrap(True)
        progress = QGroupBox("Progress")
        grid = QFormLayout(progress)
        grid.addRow("Work folder", self.work)
        grid.addRow("Generation", self.generation_bar)
        grid.addRow("", self.generation_text)
        grid.addRow("Training", self.training_bar)
        grid.addRow("", self.training_text)
        state_row = QHBoxLayout()  # beside the state, not the buttons: the tab stays as narrow
        state_row.addWidget(self.state, 1)
        state_row.addWidget(self.why_button)
        grid.addRow(state_row)

        self.plot = pg.PlotWidget()
        style_plot(self.plot, "Validation after each epoch", "epoch", "top-1, τ")
        self.plot.setMinimumHeight(PLOT_MIN_HEIGHT)
        self.top1_line = self.plot.plot(
            pen=pg.mkPen(TOP1_COLOR, width=2), symbol="o", symbolBrush=TOP1_COLOR, name="top-1"
        )
        self.tau_line = self.plot.plot(
            pen=pg.mkPen(TAU_COLOR, width=2), symbol="s", symbolBrush=TAU_COLOR, name="τ"
        )
        self.legend = QLabel(LEGEND)  # above the plot: never behind a curve, never clipped
        self.legend.setWordWrap(True)
        self.by_kind = QLabel("validation by kind: after training")
        self.by_kind.setWordWrap(True)
        # the evidence of Why this τ?: a window of its own, so the tab keeps its height
        self.why = QMessageBox(QMessageBox.Icon.Information, "Why this τ", "", parent=self)
        self.why.setModal(False)
        self.why.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        for group in (settings, progress):  # tighter than the style's default spacing
            group.layout().setContentsMargins(6, 4, 6, 4)
        grid.setVerticalSpacing(4)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.setSpacing(4)
        layout.addWidget(settings)
        layout.addWidget(progress)
        layout.addWidget(self.legend)
        layout.addWidget(self.plot, 1)
        layout.addWidget(self.by_kind)
        self.set_running(False, can_resume=False, head_ready=False)

    def chosen_sources(self) -> tuple[str, ...]:
        return tuple(s for s, box in self.sources.items() if box.isChecked())

    def set_running(self, running: bool, can_resume: bool, head_ready: bool) -> None:
        for widget in (*self.sources.values(), self.tokens, self.layout_box, self.minutes):
            widget.setEnabled(not running)
        self.start_button.setEnabled(not running)
        self.stop_button.setEnabled(running)
        self.resume_button.setEnabled(not running and can_resume)
        self.compare_button.setEnabled(not running and head_ready)
        self.why_button.setEnabled(not running and head_ready)

    def show_why(self, text: str) -> None:
        """The evidence for the new head's τ and what to do, in its window."""
        self.why.setText(text)
        self.why.show()

    def show_work(self, work: str) -> None:
        """The work folder (cut at the tab's edge; whole in the tooltip)."""
        self.work.setText(work)
        self.work.setToolTip(work)

    def show_validation(self, epochs: tuple[EpochValidation, ...]) -> None:
        top1 = [v for v in epochs if v.teacher_forced_top1 is not None]
        tau = [v for v in epochs if v.tau is not None]
        self.top1_line.setData([v.epoch for v in top1], [v.teacher_forced_top1 for v in top1])
        self.tau_line.setData([v.epoch for v in tau], [v.tau for v in tau])

    def show_by_kind(self, rows: tuple[KindValidation, ...]) -> None:
        if not rows:
            self.by_kind.setText("validation by kind: none measured")
            return
        cells = "; ".join(
            f"{row.kind} top-1 {row.teacher_forced_top1:.2f}, τ {row.tau:.2f}" for row in rows
        )
        self.by_kind.setText(f"validation by kind: {cells}")
