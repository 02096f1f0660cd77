"""Start-up and model loading: the engine first, then the target chosen in the Models panel.

The window opens at once; `start_engine` imports the engine (torch) in a background task and
reads its method and policy registries into the panels, then loads the target (the embedded
one by default). A new user's window first selects the fastest lossless method, told why in
one line (app/first_run.py): whole in the Output tab, and short enough for the status bar of a
1280-pixel window there ("selected X (why: in the Output tab); press Compare …"). A failed load
keeps the model loaded before, says so, and puts that model's spec back in the Target box (the
box names what is loaded, not the path that failed); the next good load takes the failure off
the status line. Drafts and heads that a run loads show
their progress under Models too, and a load the run left unfinished (it failed, or Stop came
first) says it did not load once the runs have ended.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, QTimer, Signal

from app.engine_api import Engine, Registries, TargetInfo, TargetRequest, engine_ended
from app.first_run import first_choice
from app.run_controller import RunController
from app.session import Activity, Session
from app.status_controller import StatusController
from app.widgets.compare_panel import ComparePanel
from app.widgets.decoding_panel import DecodingPanel
from app.widgets.models_panel import ModelsPanel
from app.widgets.output_panel import OutputPanel
from app.widgets.status_bar import StatusBar

CHOICE_MS = 15_000  # how long the status line keeps the first run's choice


class ModelLoader(QObject):
    loaded = Signal(object)  # TargetInfo

    def __init__(
        self,
        engine: Engine,
        session: Session,
        runs: RunController,
        status: StatusController,
        bar: StatusBar,
        models: ModelsPanel,
        decoding: DecodingPanel,
        compare: ComparePanel,
        output: OutputPanel,
        first_run: bool,
        parent: QObject | None = None,
    ) -> None:
        """`first_run`: no settings were saved yet, so a first method is chosen and said."""
        super().__init__(parent)
        self.engine, self.session, self.runs, self.status, self.bar = (
            engine,
            session,
            runs,
            status,
            bar,
        )
        self.models, self.decoding, self.compare, self.output = models, decoding, compare, output
        self.first_run = first_run
        self.first_choice_reason = ""  # what a new user's window selected, and why
        self._failure = ""  # the failed load's message, while the status line may show it
        self._restart = False  # Restart engine was pressed while something still ran
        session.on_change(self._on_session_change)
        models.load_requested.connect(lambda *_: self.load_target())
        models.cancel_requested.connect(runs.cancel_task)
        runs.task_progress.connect(models.show_progress)
        runs.task_failed.connect(self._on_failed)
        runs.progress.connect(models.show_extra_progress)  # a run's draft or head loading
        runs.queue_done.connect(models.end_extra_progress)  # ... no longer, once runs end

    def start_engine(self) -> None:
        self.runs.run_task(
            lambda progress: self.engine.registries(), self._on_registries, Activity.STARTING
        )

    def restart_engine(self) -> None:
        """A new engine process with the models chosen in the Models panel (what was typed
        and chosen in the window stays as it is). Pressed while the work that met the dead
        engine is still ending, it starts as soon as that has ended."""
        self.bar.showMessage("restarting the engine…", 5000)
        if self.session.busy or self.runs.running or self.runs.task_running:
            self._restart = True
            return
        self.start_engine()

    def _on_session_change(self, what: str) -> None:
        if what == "target" and self.session.target is None:
            self.models.show_unloaded("nothing is loaded: the engine process ended")
            self.bar.clear_model()
        if what == "activity" and self._restart and not self.session.busy:
            self._restart = False  # once the ending work's own bookkeeping is done
            QTimer.singleShot(0, self.restart_engine)

    def _on_registries(self, registries: Registries) -> None:
        self.session.set_registries(registries)
        self.decoding.set_registries(registries)
        self.compare.set_registries(registries)
        if self.first_run:  # once: a restarted engine keeps what the user chose since
            self.first_run = False
            self._first_choice(registries)
        self.load_target()

    def _first_choice(self, registries: Registries) -> None:
        """A new user starts on the fastest lossless method, told in one line why."""
        head = self.models.specs()["head"]
        choice = first_choice(registries, self.models.target.spec() or "embedded", head)
        if choice is None:
            return
        self.decoding.apply({**self.decoding.values(), "method": choice.method})
        self.first_choice_reason = choice.reason
        self.output.summary.setText(choice.reason)
        info = registries.method(choice.method)
        label = info.label if info is not None else choice.method
        self.status.note(
            f"selected {label} (why: in the Output tab); press Compare to measure it against "
            "the others here",
            CHOICE_MS,
        )

    def load_target(self) -> None:
        if self.session.busy or self.session.registries is None:
            return
        models = self.models
        spec = models.target.spec() or "embedded"
        device, dtype = models.device.currentText(), models.dtype.currentText()
        target = TargetRequest(spec, device, dtype, models.load_settings())
        started = self.runs.run_task(
            lambda progress, stop: self.engine.load_target(target, progress, stop),
            self._on_loaded,
            stoppable=True,
        )
        if started:  # the loaded model stays until the new one has loaded: a failure keeps it
            models.set_loading(True)
            models.show_progress(f"loading {spec}…", 0.0)
            self.status.show(f"loading {spec}…")

    def _on_loaded(self, info: TargetInfo) -> None:
        self.session.set_target(info)
        self.models.show_loaded(info)
        self.bar.set_model(info.spec, info.device, info.dtype)
        if self._failure and self.bar.currentMessage() == self._failure:
            self.bar.clearMessage()  # an earlier load's failure is stale now
        self._failure = ""
        self.loaded.emit(info)

    def _on_failed(self, message: str, user: bool) -> None:
        kept = self.session.target
        if kept is not None and not engine_ended(message):  # the engine keeps the old model
            # until a new one has loaded (unless its process ended, and the model with it)
            message = f"{message} ({kept.spec} is still loaded)"
        else:
            kept = None
        self.models.show_failed(message, kept.spec if kept is not None else None)
        self.session.report(message, user=user)
        self._failure = message
