"""The Server tab and File ▸ Export to server…: from the tuned setting to a running server.

`ServerController` polls the URL in the view on the shared `JobRunner` (`ServerWorker`), puts
each `Interval` into the view, and words every other poll as the view's status line: an
unreachable server or a restart is a line, never a dialog, and polling goes on. It shows
the playground's last finished speculative run (`Session.last_results["run"]`) beside the
server. The URL is remembered in the settings (`server_url`, read from the view when they are
saved). `export_commands` gives the vLLM and SGLang commands for the current model and
decoding settings (`specdec_core.serve`), which `open_export` shows (File ▸ Export to
server…); the window adds the tab.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Slot

from app.jobs import JobRunner
from app.palette import method_color
from app.server_worker import ServerWorker
from app.session import Session
from app.widgets.decoding_panel import DecodingPanel
from app.widgets.models_panel import ModelsPanel
from app.widgets.server_export_dialog import ServerExportDialog
from app.widgets.server_view import ServerView
from app.worker import Job
from specdec_core.errors import SpecdecError
from specdec_core.server_metrics import RESET, MetricsPoller

if TYPE_CHECKING:
    from specdec_core.serve import ServeCommand
    from specdec_core.server_metrics import Poll


class ServerController(QObject):
    def __init__(
        self,
        session: Session,
        url: str,
        jobs: JobRunner,
        save: Callable[[], None],
        decoding: DecodingPanel,
        models: ModelsPanel,
        parent: QObject | None = None,
    ) -> None:
        """`url`: the server to watch, as last saved; `save()` saves the settings (a URL
        polled is remembered); `decoding` and `models`: what Export to server… serves."""
        super().__init__(parent)
        self.session = session
        self.jobs = jobs
        self.save = save
        self.decoding, self.models = decoding, models
        self.view = ServerView()
        self.view.url.setText(url)
        self.view.start_requested.connect(self.start)
        self.view.stop_requested.connect(self.stop)
        self.job: Job | None = None
        self.polls = 0
        self.failed = False
        self.last_poll: Poll | None = None
        self.export_dialog: ServerExportDialog | None = None
        session.on_change(self._on_session_change)
        self._on_session_change("result:run")

    @property
    def running(self) -> bool:
        return self.job is not None

    def url(self) -> str:
        return self.view.url.text()

    def open_export(self) -> ServerExportDialog:
        """The vLLM and SGLang commands for the current model and decoding settings."""
        loaded, models = self.session.target, self.models
        commands = export_commands(
            self.decoding.method_name(),
            self.decoding.config(),
            models.target.spec() or "embedded",
            models.specs(),
            models.dtype.currentText(),
            loaded.device if loaded is not None else None,
        )
        self.export_dialog = ServerExportDialog(commands, parent=self.view.window())
        self.export_dialog.open()
        return self.export_dialog

    def start(self) -> bool:
        if self.running:
            return False
        period = self.view.period.value()
        try:
            poller = MetricsPoller(self.view.url.text(), interval=period, timeout=min(3.0, period))
        except SpecdecError as error:
            self.view.status.setText(str(error))
            return False
        self.save()
        worker = ServerWorker(poller, period)
        worker.polled.connect(self._on_poll)
        worker.errored.connect(self._on_error)
        worker.done.connect(self._on_done)
        self.polls, self.failed = 0, False
        self.view.begin()
        self.view.status.setText(f"polling {poller.base}/metrics every {period:g} s…")
        self.view.set_running(True)
        self.job = self.jobs.start(worker)
        return True

    def stop(self) -> None:
        if self.job is not None:
            self.job.stop()
            self.view.status.setText("stopping…")

    @Slot(object)
    def _on_poll(self, poll: Poll) -> None:
        self.polls += 1
        self.last_poll = poll
        self.view.status.setText(poll.message)
        if poll.state == RESET:
            self.view.restarted()
        if poll.interval is not None:
            self.view.add_interval(poll.interval)

    @Slot(str, bool)
    def _on_error(self, message: str, user: bool) -> None:
        self.failed = True
        self.view.status.setText(f"polling stopped: {message}")

    @Slot()
    def _on_done(self) -> None:
        self.job = None
        self.view.set_running(False)
        if not self.failed:
            self.view.status.setText(f"stopped after {self.polls} polls")

    def _on_session_change(self, what: str) -> None:
        """A finished speculative run is the playground's measurement to compare with (the
        autoregressive reference that follows a Generate is not)."""
        summary = self.session.last_results.get("run") if what == "result:run" else None
        if summary is not None and summary.method != "ar":
            registries = self.session.registries
            names = [m.name for m in registries.methods] if registries else []
            index = names.index(summary.method) if summary.method in names else 0
            self.view.set_playground(summary, method_color(summary.method, index))


def export_commands(
    method: str,
    config,
    target: str,
    specs: dict[str, str],
    dtype: str,
    device: str | None,
) -> dict[str, ServeCommand | str]:
    """engine -> the server command for this setting, or why it cannot be served."""
    from specdec_core.export import ENGINES, METHOD_MAP  # imports torch: on demand
    from specdec_core.serve import serve_command, tensor_parallel_size

    needs = METHOD_MAP.get(method, (None,))[0]
    model = specs.get(needs, "") if needs else ""
    commands: dict[str, ServeCommand | str] = {}
    for engine in ENGINES:
        try:
            commands[engine] = serve_command(
                engine, method, config, target, model, dtype, tensor_parallel_size(device)
            )
        except SpecdecError as error:
            commands[engine] = f"cannot serve this setting: {error}"
    return commands
