"""The playground window: models and decoding on the left, prompt and tokens in the middle,
live plots on the right. It builds the panels and composes the controllers, nothing more:

- runs: `RunController` (one queue at a time) and the owners of its queues, each drawing only
  its own runs: `SingleRunController` (Generate, with its measured speedup),
  `CompareController` (Compare) and `ChatController` (the Chat tab);
- `ModelLoader` (start-up: the engine, its registries, the target), `StatusController` (the
  state line and what may be pressed, from the Qt-free `Session`), `ErrorDialog`;
- the tabs' own controllers (Sweep, Server, Train) and the Adaptation box;
- `FileActions` (open a prompt, export), `WindowSettings` (what is saved), `NextRunNote`.

Neither the widgets nor the workers know about each other. The window opens at once; the
engine (torch) is imported in a background task, then the target loads.
"""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import QMainWindow, QMessageBox, QTabWidget, QWidget

from app import qt_compat
from app.adapt_controller import AdaptController
from app.chat_controller import ChatController
from app.chat_store import ChatStore
from app.compare_controller import CompareController
from app.engine import SpecdecEngine
from app.engine_api import Engine, Registries, RunRequest, TargetInfo
from app.error_dialog import ErrorDialog
from app.file_actions import FileActions
from app.jobs import JobRunner
from app.logs import log_path
from app.menus import Actions, create_actions, create_menus, show_about, show_help
from app.method_params import MethodParams
from app.method_style import MethodStyle
from app.model_loader import ModelLoader
from app.next_run_note import NextRunNote
from app.reference import REFERENCE, References
from app.reference_store import ReferenceStore
from app.run_controller import RunController
from app.run_inputs import RunInputs
from app.run_parts import RunParts
from app.server_controller import ServerController
from app.session import Session
from app.settings import settings_path
from app.single_run_controller import SingleRunController
from app.status_controller import StatusController
from app.sweep_controller import SweepController
from app.train_controller import TrainController
from app.trained_head import TrainedHead
from app.widgets.adapt_panel import AdaptPanel
from app.widgets.chat_view import ChatView
from app.widgets.compare_panel import ComparePanel
from app.widgets.decoding_panel import DecodingPanel
from app.widgets.kind_help import KindHelp
from app.widgets.models_panel import ModelsPanel
from app.widgets.output_panel import OutputPanel
from app.widgets.plots_panel import PlotsPanel
from app.widgets.prompt_panel import PromptPanel
from app.widgets.status_bar import StatusBar
from app.widgets.train_view import TrainView
from app.window_layout import scrolled_column, split
from app.window_settings import WindowSettings
from specdec_core.decoding.events import RunSummary
from specdec_core.measurement.run_distance import RunDistance

log = logging.getLogger(__name__)
TITLE = "specdec-playground"
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
        self.setWindowTitle(TITLE)
        self.engine = engine or SpecdecEngine()
        self.session = Session()
        self.jobs = JobRunner(self)
        self.controller = RunController(self.engine, self.session, self.jobs, self)
        self._build()
        self.actions = create_actions(self)
        self.menus = create_menus(self, self.actions)
        self.settings_file = settings_file or settings_path()
        self.settings = WindowSettings(
            self.settings_file, self, self.splitter, self.models, self.decoding, self.compare,
            self.prompt, self.show_rejected, (self.in_chat, self.show_chat),
            lambda: self.server.url(), self.status, self.actions.measure_speedup, self.chat_view,
        )  # fmt: skip
        self.settings_note = self.settings.note
        self.errors = ErrorDialog(self, self.status, lambda: self.loader.restart_engine())
        self.state = StatusController(
            self.session, self.controller, self.status, self.errors, self.actions, self.prompt,
            self.compare, self.chat_view, self.models,
        )  # fmt: skip
        self.method_params = MethodParams()  # Tune's choices, taken by every run
        self.inputs = RunInputs(
            self.session, self.prompt, self.decoding, self.models, self.method_params
        )
        parts = RunParts(self.controller, self.inputs, MethodStyle(self.session), self.plots)
        self.references = References(  # the speedup's autoregressive references, kept
            ReferenceStore.default(), self.actions.measure_speedup.isChecked, lambda: self.target
        )
        self.single = SingleRunController(
            parts, self.output, self.state.show, lambda: self._show(self.output), self.references
        )
        self.comparison = CompareController(
            parts, self.compare, self.state.show, lambda: self._show(self.compare)
        )
        self.chat = ChatController(
            self.session, self.engine, parts, self.chat_view, self.show_chat, self.references,
            ChatStore.default(),
        )  # fmt: skip
        self.loader = ModelLoader(
            self.engine, self.session, self.controller, self.state, self.status, self.models,
            self.decoding, self.compare, self.output, self.settings.first_run, self,
        )  # fmt: skip
        self.loader.loaded.connect(lambda info: self.setWindowTitle(f"{TITLE} — {info.spec}"))
        self.sweep = self._install_sweep()  # the Sweep tab and Run ▸ Tune k
        self.server = ServerController(  # the Server tab, File ▸ Export to server…
            self.session, self.engine, self.settings.saved.server_url, self.jobs,
            self.settings.save, self.decoding, self.models, self,
            lambda: (self.prompt.text(), self.prompt.raw.isChecked()),
        )  # fmt: skip
        self.training = TrainController(  # the Train tab
            TrainView(), lambda: self.target.spec if self.target else None, self
        )
        self.loader.loaded.connect(lambda info: self.training.set_target(info.spec))
        for tab, name in ((self.server.view, "Server"), (self.training.view, "Train")):
            self.tabs.addTab(tab, name)
        self.trained = TrainedHead(self.training, self.models, self.status, self.run_compare)
        self.adaptation = AdaptController(
            self.session, self.engine, self.adapt_panel, self.controller, self.jobs, parent=self
        )
        self.files = FileActions(self, self.session, self.prompt, self.compare, self.status)
        self.next_run = NextRunNote(self.session, self.decoding, self.status)
        self._connect(self.actions)
        self.settings.apply()
        self.state.show("loading engine…")
        if autoload:
            QTimer.singleShot(0, self.loader.start_engine)

    # -- layout -----------------------------------------------------------------------------
    def _build(self) -> None:
        self.models, self.decoding, self.adapt_panel = ModelsPanel(), DecodingPanel(), AdaptPanel()
        left = scrolled_column(self.models, self.decoding, self.adapt_panel, KindHelp())
        self.prompt, self.output = PromptPanel(), OutputPanel()
        self.token_view, self.summary = self.output.view, self.output.summary
        self.show_rejected = self.output.show_rejected
        self.compare, self.chat_view, self.tabs = ComparePanel(), ChatView(), QTabWidget()
        for widget, name in ((self.output, "Output"), (self.compare, "Compare")):
            self.tabs.addTab(widget, name)
        self.tabs.addTab(self.chat_view, "Chat")
        vertical, horizontal = Qt.Orientation.Vertical, Qt.Orientation.Horizontal
        self.middle = split(vertical, [self.prompt, self.tabs], [0, 4], [140, 700])
        self.plots = PlotsPanel()
        self.plots.set_labeler(self.engine.token_text)
        panes = [left, self.middle, self.plots]
        self.splitter = split(horizontal, panes, [0, 3, 2], [420, 680, 500])
        self.setCentralWidget(self.splitter)
        self.status = StatusBar()
        self.setStatusBar(self.status)

    def _connect(self, actions: Actions) -> None:
        files = self.files
        actions.load.triggered.connect(self.load_target)
        actions.open_prompt.triggered.connect(files.open_prompt)
        actions.export_csv.triggered.connect(lambda: files.export_dialog("csv"))
        actions.export_json.triggered.connect(lambda: files.export_dialog("json"))
        actions.export_png.triggered.connect(lambda: files.export_dialog("png"))
        actions.export_server.triggered.connect(self.server.open_export)
        actions.quit.triggered.connect(self.close)
        actions.generate.triggered.connect(self.generate)
        actions.stop.triggered.connect(self.stop)
        actions.compare.triggered.connect(self.run_compare)
        actions.measure_speedup.toggled.connect(self._set_measure_speedup)
        actions.show_rejected.toggled.connect(self.show_rejected.setChecked)
        self.show_rejected.toggled.connect(self._set_show_rejected)
        actions.output_tab.triggered.connect(lambda: self._show(self.output))
        actions.compare_tab.triggered.connect(lambda: self._show(self.compare))
        actions.chat_tab.triggered.connect(self.show_chat)
        actions.clear.triggered.connect(lambda: (self.output.clear(), self.plots.reset()))
        actions.about.triggered.connect(lambda: show_about(self, str(log_path())))
        actions.help.triggered.connect(lambda: setattr(self, "help_box", show_help(self)))
        self.prompt.generate_requested.connect(self.generate)
        self.prompt.stop_requested.connect(self.stop)
        self.compare.run_requested.connect(self.run_compare)
        self.compare.export_requested.connect(files.export_dialog)
        self.controller.queue_done.connect(self.plots.redraw)
        self.controller.measuring.connect(self.state.show)
        self.controller.measured.connect(self._plot_policy)

    def _install_sweep(self) -> SweepController:
        sweep = SweepController(
            self.session, self.engine, self.decoding, self.prompt.text, self.models.specs,
            self.jobs, parent=self, method_params=self.method_params,
        )  # fmt: skip
        self.tabs.addTab(sweep.view, "Sweep")
        self.addAction(sweep.tune_action)
        self.menus["Run"].addSeparator()
        self.menus["Run"].addAction(sweep.tune_action)
        return sweep

    # -- what the window shows ----------------------------------------------------------------
    @property
    def registries(self) -> Registries | None:
        return self.session.registries

    @property
    def target(self) -> TargetInfo | None:
        return self.session.target

    @property
    def last_error(self) -> str | None:
        return self.errors.last_error

    @property
    def error_box(self) -> QMessageBox | None:
        return self.errors.box

    def ready(self) -> bool:
        return self.session.ready()

    def in_chat(self) -> bool:
        return self.tabs.currentWidget() is self.chat_view

    def show_chat(self) -> None:
        self._show(self.chat_view)

    def _show(self, tab: QWidget) -> None:
        self.tabs.setCurrentWidget(tab)

    def _plot_policy(
        self, request: RunRequest, summary: RunSummary, distance: RunDistance | None
    ) -> None:
        """A finished run on the Decoding panel's τ-against-distance plot; not an
        autoregressive run (τ 1 at distance 0 whatever the policy: Generate's reference)."""
        if request.method != REFERENCE:
            self.decoding.add_run(summary, distance)

    def _set_measure_speedup(self, on: bool) -> None:
        """Run ▸ Measure the speedup: off stops a reference in the background at once."""
        if not on:
            self.controller.stop_reference()

    def _set_show_rejected(self, show: bool) -> None:
        self.actions.show_rejected.setChecked(show)
        self.token_view.set_show_rejected(show)
        self.compare.columns.set_show_rejected(show)

    # -- what the user asks -------------------------------------------------------------------
    def load_target(self) -> None:
        self.loader.load_target()

    def generate(self) -> None:
        """Generate in the Output tab, or send the prompt box as the chat's next message."""
        if not self.ready() or not self.inputs.method() or not self.inputs.prompt_given():
            return
        self.settings.save()
        if self.in_chat():
            self.chat.send_prompt()
        else:
            self.single.generate()

    def run_compare(self) -> None:
        if self.ready() and self.inputs.prompt_given():
            self.settings.save()
            self.comparison.run()

    def stop(self) -> None:
        if self.sweep.running:  # a sweep or Tune k: it ends after the point being measured
            self.sweep.stop()
        if self.server.checking:  # Check with vLLM here: between prompts, the engine with it
            self.server.stop_check()
            self.state.show("stopping the serving check…")
        if self.controller.running:
            self.controller.stop()
            self.state.show("stopping…")
        elif self.controller.measuring_reference:  # the speedup's reference, in the background
            self.controller.stop()

    def edit_last_turn(self) -> None:
        self.chat.edit_last_turn()

    def regenerate(self) -> None:
        self.chat.regenerate_last()

    def save_chat(self, path: Path) -> None:
        self.chat.save(path)

    def load_chat(self, path: Path) -> None:
        self.chat.load(path)

    def closeEvent(self, event: QCloseEvent) -> None:
        self.settings.save()
        self.hide()  # a model load cannot be interrupted: do not look frozen while it ends
        self.training.shutdown()  # a training child stops; Resume continues it later
        if not self.controller.shutdown(SHUTDOWN_MS):
            log.warning("a worker thread did not end within %d s", SHUTDOWN_MS // 1000)
        self.engine.close()  # an engine process ends with the window
        super().closeEvent(event)
