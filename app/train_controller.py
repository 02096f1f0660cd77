"""The Train tab's controller: runs generation, then training, as child processes beside the
window (never in its process), follows their files with a QTimer, and hands the finished head
to the Head picker.

Stop sends the child SIGINT (both commands then stop cleanly: the job after writing its
status, training after its last checkpoint) and kills it if it has not ended in a while;
Resume starts the step again on the same work folder, which resumes.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QObject, QProcess, QTimer, Signal

from app.training_plan import (
    TrainingPlan,
    default_work,
    finished_head,
    generation_done,
    read_generation,
    read_training,
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
        self.step = ""  # "generation" | "training" while a child runs
        self.child: QProcess | None = None
        self.stopping = False
        self.timer = QTimer(self)
        self.timer.setInterval(POLL_MS)
        self.timer.timeout.connect(self.poll)
        view.start_button.clicked.connect(self.start)
        view.stop_button.clicked.connect(self.stop)
        view.resume_button.clicked.connect(self.resume)

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

    # -- start, stop, resume -------------------------------------------------------------------
    def start(self) -> None:
        plan = self.plan_from_view()
        if plan is not None and not self.running:
            self.plan = plan
            self._next()

    def resume(self) -> None:
        if self.plan is not None and not self.running:
            self._next()

    def stop(self) -> None:
        if self.child is None:
            return
        self.stopping = True
        self.view.state.setText(f"stopping the {self.step}…")
        pid = self.child.processId()
        if pid:
            os.kill(pid, signal.SIGINT)
        child = self.child
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
        self.view.work.setText(str(plan.work))
        if not generation_done(plan):
            self._launch("generation", plan.generation_argv())
        elif finished_head(plan) is None:
            self._launch("training", plan.training_argv())
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
        self.child, self.step, self.stopping = child, step, False
        child.start(argv[0], argv[1:])
        self.view.state.setText(f"{step} running beside the window (log: {log})")
        self.view.set_running(True, can_resume=False, head_ready=False)
        self.timer.start()

    def _ended(self, child: QProcess, code: int) -> None:
        if child is not self.child:
            return
        plan, step = self.plan, self.step
        assert plan is not None
        self.child, self.step = None, ""
        child.deleteLater()
        self.poll()
        if self.stopping:
            self.timer.stop()
            self.view.state.setText(f"{step} stopped; Resume continues from {plan.work}")
            self.view.set_running(False, can_resume=True, head_ready=False)
        elif code == 0:
            self._next()
        else:
            self.timer.stop()
            self.view.state.setText(
                f"{step} failed: {_last_line(plan.work / f'{step}.log')} — fix it and press Resume"
            )
            self.view.set_running(False, can_resume=True, head_ready=False)

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
        generation = read_generation(plan.work)
        if generation is not None:
            self.view.generation_bar.setValue(round(generation.fraction * 1000))
            rate = f"{generation.tokens_per_s:.0f}" if generation.tokens_per_s else "-"
            eta = "done" if generation.state == "finished" else format_duration(generation.eta_s)
            self.view.generation_text.setText(
                f"{generation.answer_tokens:,} / {generation.budget:,} answer tokens, "
                f"{generation.batches} batches; {rate} tokens/s; ETA {eta} ({generation.state})"
            )
        training = read_training(plan)
        if training is not None:
            self.view.training_bar.setValue(round(1000 * training.step / max(1, training.steps)))
            rate = f"{training.tokens_per_s:.0f}" if training.tokens_per_s else "-"
            eta = "done" if training.finished else format_duration(training.eta_s)
            self.view.training_text.setText(
                f"epoch {training.epoch:.2f}, step {training.step} / {training.steps}; "
                f"{rate} tokens/s; ETA {eta}"
            )
            self.view.show_validation(training.validation)
        by_kind = finished_head(plan)
        if by_kind is not None:
            self.view.show_by_kind(by_kind)


def _last_line(log: Path) -> str:
    try:
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "no log"
    return lines[-1] if lines else "no output"
