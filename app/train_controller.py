"""The Train tab's controller: runs generation, then training, as child processes beside the
window (never in its process), follows their files with a QTimer, and hands the finished head
to the Head picker.

Stop (the tab's button, or Esc in the tab) sends the child SIGINT (both commands then stop
within a batch: the job after writing its status, training after its last checkpoint) and
kills it if it has not ended in a while; Resume starts the step again on the same work folder,
which resumes.

The tab's minutes are one time budget for each Start or Resume (training_plan.py): generation
may take its share, after which the window stops the job once it has a finished batch and
training goes on with what it made and the time left, less what a child takes to start (its
imports and the target's load, timed on the generation child: the training command's own
budget starts only once it runs). The progress lines are redrawn every
poll, so they always say how long the step has run, its ETA (never past the budget) and, while
a batch or the first status is awaited, what runs and for how long.

The children's progress reaches the tab only through their files (the generation job's
WORK/data/status.json, training's WORK/head/progress.json), read on every poll. Before a
child has an estimate (its first batch still running) the ETA says what is known instead of a
bare "?": the budget's end when a time budget is set ("ETA at most 0m37s"),
else "estimating…" with how long the step has run (`eta_words`). The job's status carries the
batch it is making, so the generation line shows its answer tokens as they come ("312 answer
tokens so far in batch 1 (magpie)"), and the ETA the job derives from their rate.
"""

from __future__ import annotations

import math
import os
import re
import signal
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QObject, QProcess, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QLabel

from app.training_plan import (
    TrainingPlan,
    default_work,
    finished_head,
    generation_done,
    read_generation,
    read_training,
    read_why,
    why_words,
)
from app.widgets.train_view import TrainView
from specdec_core.files import format_duration

POLL_MS = 500
KILL_AFTER_MS = 15_000


class TrainController(QObject):
    head_ready = Signal(str)  # the finished head's directory

    def __init__(
        self, view: TrainView, target: Callable[[], str | None], parent: QObject | None = None
    ) -> None:
        super().__init__(parent)
        self.view, self.target = view, target
        # the settings the tab does not show (tests shrink them for a tiny model)
        self.template = TrainingPlan(target="", work=Path())
        self.plan: TrainingPlan | None = None
        self.step = ""  # "generation" | "training" | "why" while a child runs
        self.child: QProcess | None = None
        self.stopping = False
        self.budget_cut = False  # the window ended generation at its share of the budget
        self.began = 0.0  # time.monotonic() of this Start or Resume (the budget's clock)
        self.step_began = 0.0  # of the child running
        self.startup = 0.0  # seconds a child took to start (the generation's, to its status)
        self.launched = 0.0  # time.time() of the child's launch
        self.timer = QTimer(self)
        self.timer.setInterval(POLL_MS)
        self.timer.timeout.connect(self.poll)
        view.start_button.clicked.connect(self.start)
        view.stop_button.clicked.connect(self.stop)
        view.resume_button.clicked.connect(self.resume)
        view.why_button.clicked.connect(self.explain)
        self.stop_action = QAction("Stop training", view)  # Esc while the tab has the focus
        self.stop_action.setShortcut(QKeySequence(Qt.Key.Key_Escape))
        self.stop_action.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        self.stop_action.setEnabled(False)
        self.stop_action.triggered.connect(self.stop)
        view.addAction(self.stop_action)

    @property
    def running(self) -> bool:
        return self.child is not None

    def set_target(self, spec: str | None) -> None:
        self.view.target.setText(spec or "no target loaded")

    def plan_from_view(self) -> TrainingPlan | None:
        target = self.target()
        if not target:
            self.view.state.setText("Load a target first (Models ▸ Load).")
            return None
        sources = self.view.chosen_sources()
        if not sources:
            self.view.state.setText("Check at least one data source.")
            return None
        layout = self.view.layout_box.currentText()
        minutes = self.view.minutes.value()
        return replace(
            self.template,
            target=target,
            work=default_work(target, layout),
            sources=sources,
            tokens=self.view.tokens.value() * 1000,
            layout=layout,
            seconds=minutes * 60 if minutes else None,
        )

    # -- the budget ------------------------------------------------------------------------------
    def left(self) -> float | None:
        """Seconds left of this Start's or Resume's time budget (None: no budget)."""
        plan = self.plan
        if plan is None or not plan.seconds:
            return None
        return max(0.0, plan.seconds - (time.monotonic() - self.began))

    def generation_left(self) -> float | None:
        """Seconds left of generation's share of the budget (None: no budget)."""
        plan = self.plan
        share = plan.generation_seconds() if plan is not None else None
        return None if share is None else max(0.0, share - (time.monotonic() - self.began))

    # -- start, stop, resume -------------------------------------------------------------------
    def start(self) -> None:
        plan = self.plan_from_view()
        if plan is not None and not self.running:
            self.plan = plan
            plan.budget_mark.unlink(missing_ok=True)  # Start generates again: its share
            self.began = time.monotonic()
            self._next()

    def resume(self) -> None:
        if self.plan is not None and not self.running:
            self.began = time.monotonic()
            self._next()

    def explain(self) -> None:
        """Why the finished head's τ is what it is: `specdec validate --why` beside the window,
        its evidence shown when it ends."""
        plan = self.plan
        if plan is not None and not self.running and finished_head(plan) is not None:
            self._launch("why", plan.why_argv())
            self.view.state.setText("measuring why the new head's τ is what it is, beside the "
                                    "window (Stop ends it)…")  # fmt: skip

    def stop(self) -> None:
        if self.child is None:
            return
        self.stopping = True
        self.view.state.setText(f"stopping the {self.step}…")
        self._interrupt()

    def _interrupt(self) -> None:
        """SIGINT to the child; killed if it has not ended in a while."""
        child = self.child
        if child is None:
            return
        pid = child.processId()
        if pid:
            os.kill(pid, signal.SIGINT)
        QTimer.singleShot(KILL_AFTER_MS, lambda: child.kill() if self.child is child else None)

    def shutdown(self, wait_ms: int = 5000) -> None:
        """The window closes: stop the child (it resumes on the next Resume)."""
        child = self.child
        if child is not None:
            self.stop()
            if not child.waitForFinished(wait_ms):
                child.kill()
                child.waitForFinished(1000)

    def _next(self) -> None:
        """Start the step the work folder needs: generation, then training."""
        plan = self.plan
        assert plan is not None
        self.view.show_work(str(plan.work))
        if not generation_done(plan):
            self._launch("generation", plan.generation_argv())
        elif finished_head(plan) is None:
            left = self.left()
            seconds = None if left is None else max(1.0, left - self.startup)
            self._launch("training", plan.training_argv(seconds))
        else:
            self._finished()

    def _launch(self, step: str, argv: list[str]) -> None:
        plan = self.plan
        assert plan is not None
        plan.work.mkdir(parents=True, exist_ok=True)
        child = QProcess(self)
        child.setWorkingDirectory(str(plan.work))
        log = plan.work / f"{step}.log"
        child.setStandardOutputFile(str(log), QProcess.OpenModeFlag.Append)
        child.setStandardErrorFile(str(log), QProcess.OpenModeFlag.Append)
        child.finished.connect(lambda code, _status: self._ended(child, code))
        self.child, self.step, self.stopping, self.budget_cut = child, step, False, False
        self.step_began, self.launched = time.monotonic(), time.time()
        child.start(argv[0], argv[1:])
        self.view.state.setText(f"{step} running beside the window (log: {log.name} there)")
        self.view.set_running(True, can_resume=False, head_ready=False)
        self.stop_action.setEnabled(True)
        self.timer.start()

    def _ended(self, child: QProcess, code: int) -> None:
        if child is not self.child:
            return
        plan, step = self.plan, self.step
        assert plan is not None
        self.child, self.step = None, ""
        self.stop_action.setEnabled(False)
        child.deleteLater()
        self.poll()
        if step == "why":
            self._explained(plan, code)
        elif self.stopping:  # the user's Stop wins over the budget's
            self.timer.stop()
            self.view.state.setText(f"{step} stopped; Resume continues from {plan.work}")
            self.view.set_running(False, can_resume=True, head_ready=False)
        elif self.budget_cut:  # the window ended generation at its share: training goes on
            plan.budget_mark.write_text("generation ended at its share of the time budget\n")
            self._next()
        elif code == 0:
            self._next()
        else:
            self.timer.stop()
            line = _in_minutes(_last_line(plan.work / f"{step}.log"))
            self.view.state.setText(f"{step} failed: {line} — fix it and press Resume")
            self.view.set_running(False, can_resume=True, head_ready=False)

    def _explained(self, plan: TrainingPlan, code: int) -> None:
        """The why step ended: its evidence, or why there is none."""
        self.timer.stop()
        record = read_why(plan.work / "why.log") if code == 0 and not self.stopping else None
        state = f"trained: {plan.head} is in the Head list"
        if record is not None:
            self.view.show_why(why_words(record))
        elif self.stopping:
            state += "; Why this τ? stopped (press it again to measure)"
        else:
            state += f"; Why this τ? failed: {_in_minutes(_last_line(plan.work / 'why.log'))}"
        self.view.state.setText(state)
        self.view.set_running(False, can_resume=False, head_ready=True)

    def _finished(self) -> None:
        plan = self.plan
        assert plan is not None
        self.timer.stop()
        self.poll()
        self.view.state.setText(f"trained: {plan.head} is in the Head list")
        self.view.set_running(False, can_resume=False, head_ready=True)
        self.head_ready.emit(str(plan.head))

    # -- progress ----------------------------------------------------------------------------
    def poll(self) -> None:
        plan = self.plan
        if plan is None:
            return
        self._show_generation(plan)
        self._show_training(plan)
        by_kind = finished_head(plan)
        if by_kind is not None:
            self.view.show_by_kind(by_kind)

    def _running_for(self, step: str) -> str:
        """', 0m34s in' while `step` runs (empty otherwise)."""
        if self.step != step:
            return ""
        return f", {format_duration(time.monotonic() - self.step_began)} in"

    def _budget_words(self) -> str:
        left = self.left()
        return "" if left is None else f"; budget {format_duration(left)} left"

    def _show_starting(self, step: str, text: QLabel, loading: str) -> None:
        """Before `step` writes its first status: what it loads, for how long, the budget left."""
        if self.step == step:
            running, budget = self._running_for(step), self._budget_words()
            text.setText(f"starting: loading {loading}{running}{budget}")

    def _show_generation(self, plan: TrainingPlan) -> None:
        generation = read_generation(plan.work)
        share = self.generation_left() if self.step == "generation" else None
        if self.step == "generation" and generation is not None and not self.startup:
            self._time_startup(plan.work / "data" / "status.json")
        if generation is None:
            self._show_starting("generation", self.view.generation_text, "the target")
            return
        self.view.generation_bar.setValue(round(generation.fraction * 1000))
        rate = f"{generation.tokens_per_s:.0f}" if generation.tokens_per_s else "-"
        if generation.state == "finished":
            eta = "done"
        elif generation.state == "running":  # never past the budget's share for generation
            eta = eta_words(generation.eta_s, share)  # the line says how long it has run
        else:  # stopped or failed: the estimate it had, if any
            eta = format_duration(generation.eta_s) if generation.eta_s is not None else "—"
        batch = generation.batch if generation.state == "running" else None
        line = (
            f"{generation.answer_tokens:,} / {generation.budget:,} answer tokens, "
            f"{generation.batches} batches{f'; {batch.words()}' if batch is not None else ''}; "
            f"{rate} tokens/s; ETA {eta} ({generation.state}{self._running_for('generation')})"
        )
        if self.step == "generation" and generation.batches == 0 and batch is None:
            line += "; the first batch is running"
        self.view.generation_text.setText(line + self._budget_words())
        if self.step == "generation" and share is not None and share <= 0:
            self._end_generation_at_budget(generation.batches)

    def _time_startup(self, status: Path) -> None:
        """The job's first status of this launch: its imports and the target's load are done."""
        try:
            written = status.stat().st_mtime
        except OSError:
            return
        if written >= self.launched:  # not a status left by an earlier launch
            self.startup = written - self.launched

    def _end_generation_at_budget(self, batches: int) -> None:
        """Generation's share is spent: stop the job once it has a finished batch (training
        needs data), and go on with training."""
        if self.budget_cut or self.stopping:
            return
        if batches == 0:
            self.view.state.setText(
                "generation's share of the time budget is spent; waiting for its first batch"
            )
            return
        self.budget_cut = True
        self.view.state.setText("generation's share of the time budget is spent; training next")
        self._interrupt()

    def _show_training(self, plan: TrainingPlan) -> None:
        training = read_training(plan)
        if training is None:
            self._show_starting("training", self.view.training_text, "the target and the data")
            return
        rate = f"{training.tokens_per_s:.0f}" if training.tokens_per_s else "-"
        left = training.budget_left_s if training.budget_left_s is not None else self.left()
        running = time.monotonic() - self.step_began if self.step == "training" else None
        eta = "done" if training.finished else eta_words(training.eta_s, left, running)
        note = f" ({training.note})" if training.note and not training.finished else ""
        budget = ""
        if training.budget_left_s is not None and not training.finished:
            budget = f"; budget {format_duration(training.budget_left_s)} left"
        if training.stage == "features" and not training.finished:
            done, total = training.tokens or 0, training.tokens_total or 0
            self.view.training_bar.setValue(round(1000 * done / max(1, total)))
            self.view.training_text.setText(
                f"features: {done:,} / {total:,} tokens; {rate} tokens/s; ETA {eta}{note}{budget}"
            )
            return
        self.view.training_bar.setValue(round(1000 * training.step / max(1, training.steps)))
        where = f"epoch {training.epoch:.2f}, step {training.step} / {training.steps}"
        if not training.steps:  # the first batch runs: no step counted yet
            where = f"training: {training.tokens or 0:,} / {training.tokens_total or 0:,} tokens"
        self.view.training_text.setText(f"{where}; {rate} tokens/s; ETA {eta}{note}{budget}")
        self.view.show_validation(training.validation)


def eta_words(eta_s: float | None, left_s: float | None, running_s: float | None = None) -> str:
    """A running step's ETA as the tab says it: its estimate, never past the budget's end
    (`left_s`, None without a budget); before it has one, the budget's end ('at most
    0m37s'), or without a budget 'estimating…' and how long it has run
    (`running_s`, when the line does not say so already)."""
    if eta_s is not None:
        return format_duration(eta_s if left_s is None else min(eta_s, left_s))
    if left_s is not None:
        return f"at most {format_duration(left_s)}"
    if running_s is not None:
        return f"estimating… ({format_duration(running_s)} in)"
    return "estimating…"


def _last_line(log: Path) -> str:
    try:
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "no log"
    return lines[-1] if lines else "no output"


def _in_minutes(line: str) -> str:
    """A command's '--seconds N' advice in the tab's own words (its budget is in minutes)."""
    found = re.search(r"give --seconds (\d+) or more", line)
    if found is None:
        return line
    minutes = math.ceil(int(found.group(1)) / 6) / 10
    return line.replace(found.group(0), f"set the time budget to {minutes:g} min or more")
