"""Adapt the head to my runs: after a run queue, the engine fine-tunes the head in a worker.

`AdaptController` is given the `Session` (is the engine free? notes and errors go there), the
engine, the Adaptation box, the `RunController` (its `settled`, once a run queue and its
background reference have ended, starts an adaptation) and the shared `JobRunner`; Save adapted
head… asks for a new directory. The fine-tuning runs in a `TaskWorker` thread, never on the GUI
thread, and holds the engine's models, so it cannot overlap a run; while it runs the session is
`ADAPTING` (no run or load starts). The switch is told to the engine only when it has a model
and nothing runs (a background reference included), so the window never waits for a busy engine
process, and again after Restart engine. Reset and Save adapted head… are offered once a head
has adapted (an adaptation's τ line), until Reset or a new engine.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, Slot
from PySide6.QtWidgets import QFileDialog

from app.engine_api import Engine, Progress
from app.jobs import JobRunner
from app.run_controller import RunController
from app.session import Activity, Session
from app.widgets.adapt_panel import AdaptPanel
from app.worker import Job, TaskWorker, error_message

BUDGET_SECONDS = 0.5  # fine-tuning after each run queue


class AdaptController(QObject):
    def __init__(
        self,
        session: Session,
        engine: Engine,
        panel: AdaptPanel,
        runs: RunController,
        jobs: JobRunner,
        ask_directory: Callable[[], str | None] | None = None,
        parent: QObject | None = None,
    ) -> None:
        """`ask_directory()`: where to save the adapted head (None: not now); by default a
        file dialog."""
        super().__init__(parent)
        self.session, self.engine, self.panel, self.jobs = session, engine, panel, jobs
        self.ask_directory = ask_directory or self._ask_directory
        self.job: Job | None = None
        self._told: bool | None = None  # what the engine was last told (None: nothing yet)
        panel.toggled.connect(self._toggle)
        panel.reset_requested.connect(self.reset)
        panel.save_requested.connect(self.save)
        self.runs = runs
        runs.settled.connect(self.after_runs)
        runs.background_changed.connect(self._tell)
        session.on_change(self._on_session_change)

    @property
    def running(self) -> bool:
        return self.job is not None

    def _ask_directory(self) -> str | None:
        path, _ = QFileDialog.getSaveFileName(self.panel, "Save adapted head", "adapted-head")
        return path or None

    @Slot(bool)
    def _toggle(self, on: bool) -> None:
        self._tell()

    def _on_session_change(self, what: str) -> None:
        if what == "activity":
            self.panel.set_busy(self.session.busy)
        if what == "target" and self.session.target is None:  # the engine process ended:
            self._told = None  # the one Restart engine starts knows nothing yet
            self.panel.set_adapted(False)  # and has adapted nothing
        if what in ("activity", "target"):
            self._tell()

    def _tell(self) -> None:
        """Tell the engine whether to adapt, when it has a model and nothing runs: the engine
        process is then free, so the window never waits for it (a change during a run is
        told when the run ends; a restarted engine is told once its model has loaded)."""
        wanted = self.panel.enabled.isChecked()
        if wanted == self._told or self.session.busy or self.session.target is None:
            return
        if self.runs.measuring_reference:  # told once it has ended
            return
        try:
            self.engine.set_adapt(wanted)
        except Exception as error:  # the engine process ended meanwhile: one line, Restart
            text, user = error_message(error, "adaptation")
            self.session.report(text, user=user)
            return
        self._told = wanted

    @Slot()
    def after_runs(self) -> None:
        if self.panel.enabled.isChecked() and self.session.target is not None:
            self._start(lambda progress: self.engine.adapt(BUDGET_SECONDS, progress), self._tau)

    def reset(self) -> None:
        self._start(lambda progress: self.engine.reset_adaptation(), self._reset_done)

    def save(self) -> None:
        directory = self.ask_directory()
        if directory:
            self._start(lambda progress: self.engine.save_adapted(directory), self._note)

    def _start(self, task: Callable[[Progress], object], on_result: Callable) -> bool:
        if self.running or not self.session.ready():
            self.session.report("wait until no run is in progress", error=False)
            return False
        worker = TaskWorker(task, what="adaptation")
        worker.result.connect(on_result)
        worker.errored.connect(lambda message, user: self.session.report(message, True, user))
        worker.done.connect(self._done)
        self.session.begin(Activity.ADAPTING)
        self.job = self.jobs.start(worker)
        return True

    @Slot()
    def _done(self) -> None:
        self.job = None
        self.session.end()

    def _tau(self, line: object) -> None:
        if line:  # a head adapted
            self.panel.set_adapted(True)
            self.panel.show_tau(str(line))
            self.session.report(str(line), error=False)

    def _reset_done(self, note: object) -> None:
        self.panel.set_adapted(False)
        self.panel.show_tau("")
        self._note(note)

    def _note(self, note: object) -> None:
        self.session.report(str(note), error=False)
