"""The playground window: models and decoding on the left, prompt and tokens in the middle,
live plots on the right. It wires widgets to the `RunController` and the sweep controller and
observes the Qt-free `Session` (app/session.py) for what is loaded and what runs; neither the
widgets nor the workers know about each other.

Startup: the window opens at once; a background task imports the engine (torch) and reads
the method / policy registries, then loads the target model (the embedded one by default).
"""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

from PySide6.QtCore import QByteArray, Qt, QTimer
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import (
    QFileDialog,
    QMainWindow,
    QMessageBox,
    QScrollArea,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app import history, qt_compat, screen
from app.adapt_controller import AdaptController
from app.chat import CONVERSATION
from app.chat_controller import ChatController, is_chat
from app.engine import Engine, Registries, RunRequest, SpecdecEngine, TargetInfo
from app.export import CompareResult, write_csv, write_json
from app.first_run import first_choice
from app.jobs import JobRunner
from app.logs import log_path
from app.menus import Actions, create_actions, create_menus, show_about, show_help
from app.palette import REFERENCE_COLOR, method_color
from app.process_engine import ENDED
from app.reference import References, reference_key, reference_request, speedup_text
from app.run_controller import RunController
from app.server_controller import ServerController, export_commands
from app.session import Activity, Session
from app.settings import load_settings, save_settings, settings_path
from app.sweep_controller import SweepController
from app.train_controller import TrainController
from app.widgets.adapt_panel import AdaptPanel
from app.widgets.chat_view import ChatView
from app.widgets.compare_panel import ComparePanel
from app.widgets.decoding_panel import DecodingPanel
from app.widgets.kind_help import KindHelp
from app.widgets.models_panel import ModelsPanel
from app.widgets.output_panel import OutputPanel
from app.widgets.plots_panel import PlotsPanel
from app.widgets.prompt_panel import PromptPanel
from app.widgets.server_export_dialog import ServerExportDialog
from app.widgets.status_bar import StatusBar
from app.widgets.train_view import TrainView
from specdec_core.errors import SpecdecError
from specdec_core.events import RunSummary, Started, Step

log = logging.getLogger(__name__)
SHUTDOWN_MS = 120_000  # a model load in progress must end before the process may exit


class MainWindow(QMainWindow):
    def __init__(
        self,
        engine: Engine | None = None,
        settings_file: Path | None = None,
        autoload: bool = True,
    ) -> None:
        qt_compat.apply()
        super().__init__()
        self.setWindowTitle("specdec-playground")
        self.engine = engine or SpecdecEngine()
        self.settings_file = settings_file or settings_path()
        self.first_run = not self.settings_file.exists()
        self.settings, self.settings_note = load_settings(self.settings_file)
        self.session = Session()
        self.jobs = JobRunner(self)
        self.controller = RunController(self.engine, self.session, self.jobs, self)
        self.last_error: str | None = None
        self._first_step = False  # the current run has yet to show its first token
        self._load_failure = ""  # the failed load's message, while the status bar may show it
        self.references = References()
        self._reference: RunRequest | None = None  # the ar run measuring a speedup
        self._measured: RunSummary | None = None  # the single run it is measured for
        self.first_choice_reason = ""  # what a new user's window selected, and why
        self.trained_head = ""  # the head the Train tab finished last, and the one it replaces
        self.head_before = ""
        self.speedup_line = ""  # the last single run's measured speedup
        self.error_box: QMessageBox | None = None
        self._build()
        self.actions = create_actions(self)
        self.menus = create_menus(self, self.actions)
        self._connect(self.actions)
        self.chat = ChatController(
            self.session,
            self.engine,
            self.controller,
            self.chat_view,
            self.plots,
            self._request,
            lambda method: (self._label(method), self._color(method)),
            self,
        )
        self.sweep = self._install_sweep()  # the Sweep tab and Run ▸ Tune k
        self.server = self._install_server()  # the Server tab, File ▸ Export to server…
        self.adaptation = self._install_adaptation()  # the Adaptation box
        self.training = self._install_training()  # the Train tab
        self._apply_settings()
        self.session.on_change(self._on_session_change)
        self._update_state("loading engine…")
        if autoload:
            QTimer.singleShot(0, self.start_engine)

    # -- layout -----------------------------------------------------------------------------
    def _build(self) -> None:
        self.models = ModelsPanel()
        self.decoding = DecodingPanel()
        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.addWidget(self.models)
        left_layout.addWidget(self.decoding)
        self.adapt_panel = AdaptPanel()
        left_layout.addWidget(self.adapt_panel)
        left_layout.addWidget(KindHelp())
        left_layout.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidget(left)
        scroll.setWidgetResizable(True)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        bar = scroll.verticalScrollBar().sizeHint().width()
        scroll.setMinimumWidth(left.minimumSizeHint().width() + bar + 2)

        self.prompt = PromptPanel()
        self.output = OutputPanel()
        self.token_view = self.output.view
        self.show_rejected = self.output.show_rejected
        self.summary = self.output.summary
        self.compare = ComparePanel()
        self.tabs = QTabWidget()
        self.chat_view = ChatView()
        self.tabs.addTab(self.output, "Output")
        self.tabs.addTab(self.compare, "Compare")
        self.tabs.addTab(self.chat_view, "Chat")
        self.middle = QSplitter(Qt.Orientation.Vertical)
        self.middle.addWidget(self.prompt)
        self.middle.addWidget(self.tabs)
        self.middle.setStretchFactor(1, 4)
        self.middle.setSizes([140, 700])

        self.plots = PlotsPanel()
        self.plots.set_labeler(self.engine.token_text)
        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        for widget in (scroll, self.middle, self.plots):
            self.splitter.addWidget(widget)
        self.splitter.setStretchFactor(1, 3)
        self.splitter.setStretchFactor(2, 2)
        self.splitter.setSizes([420, 680, 500])
        self.setCentralWidget(self.splitter)
        self.status = StatusBar()
        self.setStatusBar(self.status)

    def _connect(self, actions: Actions) -> None:
        c = self.controller
        actions.load.triggered.connect(self.load_target)
        actions.open_prompt.triggered.connect(self._open_prompt)
        actions.export_csv.triggered.connect(lambda: self._export_dialog("csv"))
        actions.export_json.triggered.connect(lambda: self._export_dialog("json"))
        actions.export_png.triggered.connect(lambda: self._export_dialog("png"))
        actions.quit.triggered.connect(self.close)
        actions.generate.triggered.connect(self.generate)
        actions.stop.triggered.connect(self.stop)
        actions.compare.triggered.connect(self.run_compare)
        actions.show_rejected.toggled.connect(self.show_rejected.setChecked)
        self.show_rejected.toggled.connect(self._set_show_rejected)
        actions.output_tab.triggered.connect(lambda: self.tabs.setCurrentIndex(0))
        actions.compare_tab.triggered.connect(lambda: self.tabs.setCurrentIndex(1))
        actions.chat_tab.triggered.connect(lambda: self.tabs.setCurrentWidget(self.chat_view))
        view = self.chat_view
        view.clear_requested.connect(lambda: self.ready() and self.chat.clear())
        view.edit_requested.connect(self.edit_last_turn)
        view.regenerate_requested.connect(self.regenerate)
        view.save_requested.connect(lambda: self._chat_file_dialog(save=True))
        view.load_requested.connect(lambda: self._chat_file_dialog(save=False))
        actions.clear.triggered.connect(self._clear_output)
        actions.about.triggered.connect(lambda: show_about(self, str(log_path())))
        actions.help.triggered.connect(lambda: setattr(self, "help_box", show_help(self)))
        self.models.load_requested.connect(lambda *_: self.load_target())
        self.models.cancel_requested.connect(self.controller.cancel_task)
        self.prompt.generate_requested.connect(self.generate)
        self.prompt.stop_requested.connect(self.stop)
        self.compare.run_requested.connect(self.run_compare)
        self.compare.export_requested.connect(self._export_dialog)
        c.run_begun.connect(self._on_run_begun)
        c.started.connect(self._on_started)
        c.stepped.connect(self._on_step)
        c.finished.connect(self._on_finished)
        c.progress.connect(self.models.show_extra_progress)
        c.progress.connect(lambda message, _: self.status.showMessage(message, 5000))
        c.errored.connect(self._on_run_error)
        c.queue_done.connect(self._on_queue_done)
        c.task_progress.connect(self.models.show_progress)
        c.task_failed.connect(self._on_task_failed)

    def _install_sweep(self) -> SweepController:
        sweep = SweepController(
            self.session,
            self.engine,
            self.decoding,
            self.prompt.text,
            self.models.specs,
            self.jobs,
            parent=self,
        )
        self.tabs.addTab(sweep.view, "Sweep")
        self.addAction(sweep.tune_action)
        self.menus["Run"].addSeparator()
        self.menus["Run"].addAction(sweep.tune_action)
        return sweep

    def _install_adaptation(self) -> AdaptController:
        """Wire the Adaptation box; saving an adapted head asks for a new directory."""

        def ask() -> str | None:
            path, _ = QFileDialog.getSaveFileName(self, "Save adapted head", "adapted-head")
            return path or None

        return AdaptController(
            self.session, self.engine, self.adapt_panel, self.controller, self.jobs, ask, self
        )

    def _install_server(self) -> ServerController:
        server = ServerController(self.session, self.settings, self.jobs, self._save, parent=self)
        self.tabs.addTab(server.view, "Server")
        self.actions.export_server.triggered.connect(self.open_server_export)
        return server

    def _install_training(self) -> TrainController:
        view = TrainView()
        self.tabs.addTab(view, "Train")
        training = TrainController(view, lambda: self.target.spec if self.target else None, self)
        training.head_ready.connect(self._on_head_trained)
        view.compare_button.clicked.connect(self.compare_trained_head)
        return training

    def _on_head_trained(self, head: str) -> None:
        """A head trained in the Train tab: listed in the Head picker (its folder is added),
        on top of its recent list; the head selected before stays selected."""
        current = self.models.head.spec()
        self.models.add_folder(str(Path(head).parent))
        self.models.head.remember(head)
        self.models.head.set_spec(current)
        self.trained_head, self.head_before = head, current

    def compare_trained_head(self) -> None:
        """Compare with the trained head selected (a Compare runs one head, so the head it
        replaces is the previous Compare's; its spec stays in the Head list)."""
        if not self.trained_head:
            return
        self.models.head.set_spec(self.trained_head)
        self.status.showMessage(
            f"comparing with the trained head {self.trained_head} (it replaces "
            f"{self.head_before or 'no head'})",
            10000,
        )
        self.run_compare()

    def open_server_export(self) -> ServerExportDialog:
        """The vLLM and SGLang commands for the current model and decoding settings."""
        loaded = self.session.target
        commands = export_commands(
            self.decoding.method_name(),
            self.decoding.config(),
            self.models.target.spec() or "embedded",
            self.models.specs(),
            self.models.dtype.currentText(),
            loaded.device if loaded is not None else None,
        )
        self.server.export_dialog = ServerExportDialog(commands, parent=self)
        self.server.export_dialog.open()
        return self.server.export_dialog

    # -- session ----------------------------------------------------------------------------
    @property
    def registries(self) -> Registries | None:
        return self.session.registries

    @property
    def target(self) -> TargetInfo | None:
        return self.session.target

    @property
    def compare_mode(self) -> bool:
        return self.session.compare_mode

    def _on_session_change(self, what: str) -> None:
        if what == "message":
            message = self.session.last_message
            if message is not None and message.error:
                self.show_error(message.text, message.user)
            elif message is not None:
                self.status.showMessage(message.text, 5000)
        elif what in ("activity", "target", "registries"):
            self._update_state()

    # -- engine and models ------------------------------------------------------------------
    def start_engine(self) -> None:
        self.controller.run_task(
            lambda progress: self.engine.registries(), self._on_registries, Activity.STARTING
        )

    def restart_engine(self) -> None:
        """A new engine process with the models chosen in the Models panel (what was typed
        and chosen in the window stays as it is)."""
        self.status.showMessage("restarting the engine…", 5000)
        self.start_engine()

    def _on_registries(self, registries: Registries) -> None:
        self.session.set_registries(registries)
        self.decoding.set_registries(registries)
        self.compare.set_registries(registries)
        if self.first_run:
            self._first_choice(registries)
        self.load_target()

    def _first_choice(self, registries: Registries) -> None:
        """A new user starts on the fastest lossless method, told in one line why."""
        specs = self.models.specs()
        choice = first_choice(registries, self.models.target.spec() or "embedded", specs["head"])
        if choice is None:
            return
        self.decoding.apply({**self.decoding.values(), "method": choice.method})
        self.first_choice_reason = choice.reason
        self.summary.setText(choice.reason)
        self.status.showMessage(choice.reason, 15000)

    def load_target(self) -> None:
        if self.session.busy or self.registries is None:
            return
        spec = self.models.target.spec() or "embedded"
        device, dtype = self.models.device.currentText(), self.models.dtype.currentText()
        placement = self.models.load_settings()
        started = self.controller.run_task(
            lambda progress, stop: self.engine.load_target(
                spec, device, dtype, progress, stop, placement
            ),
            self._on_loaded,
            stoppable=True,
        )
        if started:  # the loaded model stays until the new one has loaded: a failure keeps it
            self.models.set_loading(True)
            self.models.show_progress(f"loading {spec}…", 0.0)
            self._update_state(f"loading {spec}…")

    def _on_loaded(self, info: TargetInfo) -> None:
        self.session.set_target(info)
        self.models.show_loaded(info)
        self.status.set_model(info.spec, info.device, info.dtype)
        self.training.set_target(info.spec)
        self.setWindowTitle(f"specdec-playground — {info.spec}")
        if self._load_failure and self.status.currentMessage() == self._load_failure:
            self.status.clearMessage()  # an earlier load's failure is stale now
        self._load_failure = ""

    def _on_task_failed(self, message: str, user: bool) -> None:
        kept = self.session.target
        if kept is not None:  # the engine keeps the old model until a new one has loaded
            message = f"{message} ({kept.spec} is still loaded)"
        self.models.show_failed(message)
        self.show_error(message, user)
        self._load_failure = message

    # -- runs ---------------------------------------------------------------------------------
    def ready(self) -> bool:
        return self.session.ready()

    def _request(self, method: str, comparison: str = "") -> RunRequest:
        return RunRequest(
            method=method,
            prompt=self.prompt.text(),
            config=self.decoding.config(),
            raw=self.prompt.raw.isChecked(),
            specs=self.models.specs(),
            comparison=comparison,
        )

    def _prompt_given(self) -> bool:
        """An empty prompt is refused at once, before anything runs."""
        if self.prompt.text().strip():
            return True
        self.show_error("the prompt is empty; type a prompt (or open one with Ctrl+O)")
        return False

    def in_chat(self) -> bool:
        return self.tabs.currentWidget() is self.chat_view

    def generate(self) -> None:
        if not self.ready() or not self.decoding.method_name() or not self._prompt_given():
            return
        if self.in_chat():  # the prompt box holds the next message of the conversation
            self._save()
            if self.chat.send(self.prompt.text(), self.decoding.method_name()):
                self.prompt.set_text("")
            return
        self._save()
        self.output.clear()
        self.plots.reset()
        self.tabs.setCurrentIndex(0)
        request = self._request(self.decoding.method_name())
        queue = [request]
        self._reference, self._measured = None, None
        if request.method != "ar" and self.references.get(self._key(request)) is None:
            self._reference = reference_request(request)  # measured after the run, once
            queue.append(self._reference)
        self.controller.run_queue(queue)

    def _key(self, request: RunRequest):
        return reference_key(request, self.target.spec if self.target else "")

    def run_compare(self) -> None:
        if not self.ready() or not self._prompt_given():
            return
        self._save()
        self.compare.begin()
        self.plots.reset()
        self.tabs.setCurrentIndex(1)
        comparison = uuid.uuid4().hex  # suffix methods draft from the history as it began
        requests = [self._request(m, comparison) for m in self.compare.selected()]
        # one failing method skips only itself
        self.controller.run_queue(requests, keep_going=True, compare=True)

    def stop(self) -> None:
        if self.sweep.running:  # a sweep or Tune k: it ends after the point being measured
            self.sweep.stop()
        if self.controller.running:
            self.controller.stop()
            self._update_state("stopping…")

    def _label(self, method: str) -> str:
        info = self.registries.method(method) if self.registries else None
        return info.label if info else method

    def _color(self, method: str) -> str:
        methods = [m.name for m in self.registries.methods] if self.registries else [method]
        return method_color(method, methods.index(method) if method in methods else 0)

    # -- chat ---------------------------------------------------------------------------------
    def edit_last_turn(self) -> None:
        if not self.ready():
            return
        try:
            self.prompt.set_text(self.chat.edit_last())
        except SpecdecError as error:
            self.show_error(str(error))

    def regenerate(self) -> None:
        if self.ready():
            self.chat.regenerate(self.decoding.method_name())

    def save_chat(self, path: Path) -> None:
        try:
            self.chat.save(path)
        except OSError as error:
            self.show_error(f"could not save the chat to {path} ({error}); choose another file")

    def load_chat(self, path: Path) -> None:
        if not self.ready():
            return
        try:
            self.chat.load(path)
        except (SpecdecError, OSError, ValueError) as error:
            self.show_error(str(error))
            return
        self.tabs.setCurrentWidget(self.chat_view)

    def _chat_file_dialog(self, save: bool) -> None:
        kind = "Chat (*.jsonl *.json)"
        if save:
            path, _ = QFileDialog.getSaveFileName(self, "Save chat", "chat.jsonl", kind)
            if path:
                self.save_chat(Path(path))
        else:
            path, _ = QFileDialog.getOpenFileName(self, "Load chat", "", kind)
            if path:
                self.load_chat(Path(path))

    # -- run events -----------------------------------------------------------------------------
    def _on_run_begun(self, request: RunRequest) -> None:
        if is_chat(request):  # the chat controller draws its own turns
            return
        if request is self._reference:
            self.plots.begin_series(self._label(request.method) + " (reference)", REFERENCE_COLOR)
            note = "measuring the autoregressive reference for the speedup…"
            self.summary.setText(f"{self.summary.text()}\n{note}".strip())
            self._update_state(note)
            return
        label, color = self._label(request.method), self._color(request.method)
        self.plots.begin_series(label, color)
        if self.compare_mode:
            self.compare.columns.add_column(request.method, label, color)
        self._first_step = True
        self._update_state(f"starting {label}…")  # its head or draft may load first

    def _on_started(self, started: Started) -> None:
        """The run is under way: the prompt's prefill comes before the first token."""
        request = self.controller.current
        if request is None or is_chat(request) or request is self._reference:
            return
        tokens = started.prompt_token_count
        self._update_state(f"{self._label(request.method)}: prefilling {tokens} prompt tokens…")

    def _on_step(self, step: Step) -> None:
        request = self.controller.current
        if request is None or is_chat(request):
            return
        if request is self._reference:
            self.plots.add_step(self._label(request.method) + " (reference)", step)
            return
        if self._first_step:  # the first token is out: from here the plots show progress
            self._first_step = False
            self._update_state(f"running {self._label(request.method)}…")
        if self.compare_mode:
            self.compare.columns.add_step(request.method, step)
        else:
            self.token_view.add_step(step)
        self.plots.add_step(self._label(request.method), step)

    def _on_finished(self, summary: RunSummary) -> None:
        request = self.controller.current
        if is_chat(request):
            if request.conversation == CONVERSATION:
                history.record(summary, request.prompt)
            return
        self.plots.redraw()
        if request is not None and request is self._reference:
            self.references.put(self._key(request), summary)
            if self._measured is not None:
                self._show_single(self._measured)
            return
        history.record(summary, self.prompt.text())
        self._remember_extra(summary.method)
        method = summary.method
        if self.compare_mode:
            self.compare.add_result(
                CompareResult(method, self._label(method), self._color(method), summary)
            )
            return
        if request is not None and method == "ar":
            self.references.put(self._key(request), summary)
        self._measured = summary
        self._show_single(summary)

    def _show_single(self, summary: RunSummary) -> None:
        """The run's summary, with its speedup once the reference is measured."""
        self.output.show_summary(self._label(summary.method), summary)
        request = self.controller.current
        reference = self.references.get(self._key(request)) if request is not None else None
        if reference is not None and summary.stop_reason != "stopped":
            self.speedup_line = speedup_text(summary, reference)
            self.summary.setText(f"{self.summary.text()}\n{self.speedup_line}")

    def _remember_extra(self, method: str) -> None:
        """A draft / head that just worked goes to the top of its picker's recent list."""
        info = self.registries.method(method) if self.registries else None
        pickers = {"draft": self.models.draft, "head": self.models.head}
        picker = pickers.get(info.needs or "") if info is not None else None
        if picker is not None:
            picker.remember(picker.spec())

    def _on_queue_done(self) -> None:
        self.plots.redraw()

    def _on_run_error(self, message: str, user: bool) -> None:
        request = self.controller.current
        if self.compare_mode and request is not None:
            self.compare.fail(request.method, message)
        self.show_error(message, user)

    def show_error(self, message: str, user: bool = True) -> None:
        """Show an engine error without blocking; the window stays usable."""
        self.last_error = message
        title = "Cannot do that" if user else "Something went wrong"
        self.error_box = QMessageBox(QMessageBox.Icon.Warning, title, message, parent=self)
        if ENDED in message:  # the engine died: one click starts a new one with the same models
            restart = self.error_box.addButton("Restart engine", QMessageBox.ButtonRole.AcceptRole)
            restart.clicked.connect(self.restart_engine)
            self.error_box.addButton(QMessageBox.StandardButton.Close)
        self.error_box.open()
        self.status.showMessage(message, 15000)

    def _update_state(self, state: str | None = None) -> None:
        running = self.controller.running
        activity = self.session.activity
        if state is None:
            if activity is Activity.RUNNING:
                state = "running…"
            elif activity is Activity.MEASURING:
                state = "measuring…"
            elif activity is Activity.ADAPTING:
                state = "adapting the head…"
            elif activity in (Activity.LOADING, Activity.STARTING):
                state = "loading…" if self.registries else "loading engine…"
            elif self.target is None:
                state = "no model"
            else:
                state = "ready"
        self.status.set_state(state)
        can = self.ready() or running
        self.prompt.set_state(can and not running, running)
        self.compare.set_busy(not self.ready())
        self.chat_view.set_busy(not self.ready())
        self.models.set_busy(self.session.busy)
        self.actions.generate.setEnabled(self.ready())
        self.actions.compare.setEnabled(self.ready())
        self.actions.stop.setEnabled(running or activity is Activity.MEASURING)
        self.actions.load.setEnabled(not self.session.busy)

    # -- view helpers -------------------------------------------------------------------------
    def _set_show_rejected(self, show: bool) -> None:
        self.actions.show_rejected.setChecked(show)
        self.token_view.set_show_rejected(show)
        self.compare.columns.set_show_rejected(show)

    def _clear_output(self) -> None:
        self.output.clear()
        self.plots.reset()

    def _open_prompt(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Prompt file", "", "Text (*.txt *.md);;All (*)")
        if path:
            self.prompt.set_text(Path(path).read_text(encoding="utf-8", errors="replace"))

    def _export_dialog(self, kind: str) -> None:
        if kind != "png" and not self.compare.results:
            self.show_error("run a comparison first (Run ▸ Compare methods)")
            return
        path, _ = QFileDialog.getSaveFileName(
            self, f"Export {kind.upper()}", f"comparison.{kind}", f"{kind.upper()} (*.{kind})"
        )
        if path:
            self.export(kind, Path(path))

    def export(self, kind: str, path: Path) -> None:
        if kind == "csv":
            write_csv(self.compare.results, path)
        elif kind == "json":
            write_json(self.compare.results, path, prompt=self.prompt.text())
        else:
            self.grab().save(str(path))
        self.status.showMessage(f"exported {path}", 5000)

    # -- settings -----------------------------------------------------------------------------
    def _apply_settings(self) -> None:
        values = self.settings
        self.models.apply(values)
        self.decoding.apply(values)
        self.compare.set_selected(values["compare_methods"])
        self.prompt.set_text(values["prompt"])
        self.prompt.raw.setChecked(values["raw"])
        self.show_rejected.setChecked(values["show_rejected"])
        if values["chat_mode"]:
            self.tabs.setCurrentWidget(self.chat_view)
        if values["geometry"]:
            self.restoreGeometry(QByteArray.fromHex(values["geometry"].encode()))
        else:  # fresh settings: no larger than the screen
            screen.place(self)
        if values["splitter"]:
            self.splitter.restoreState(QByteArray.fromHex(values["splitter"].encode()))
        notes = [note for note in (self.settings_note, history.check()) if note]
        if notes:
            self.status.showMessage("; ".join(notes), 15000)

    def current_settings(self) -> dict:
        return {
            **self.settings,
            **self.models.values(),
            **self.decoding.values(),
            "compare_methods": self.compare.chosen(),
            "prompt": self.prompt.text(),
            "raw": self.prompt.raw.isChecked(),
            "show_rejected": self.show_rejected.isChecked(),
            "chat_mode": self.in_chat(),
            "geometry": bytes(self.saveGeometry().toHex()).decode(),
            "splitter": bytes(self.splitter.saveState().toHex()).decode(),
        }

    def _save(self) -> None:
        try:
            save_settings(self.current_settings(), self.settings_file)
        except OSError as error:
            self.status.showMessage(f"could not save settings: {error}", 10000)

    def closeEvent(self, event: QCloseEvent) -> None:
        self._save()
        self.hide()  # a model load cannot be interrupted: do not look frozen while it ends
        self.training.shutdown()  # a training child stops; Resume continues it later
        if not self.controller.shutdown(SHUTDOWN_MS):
            log.warning("a worker thread did not end within %d s", SHUTDOWN_MS // 1000)
        self.engine.close()  # an engine process ends with the window
        super().closeEvent(event)
