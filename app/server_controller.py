"""The Server tab and File ▸ Export to server…: from the tuned setting to a running server.

`ServerController` polls the URL in the view on the shared `JobRunner` (`ServerWorker`), puts
each `Interval` into the view, and words every other poll as the view's status line: an
unreachable server or a restart is a line, never a dialog, and polling goes on. It shows
the playground's last finished speculative run (`Session.last_results["run"]`) beside the
server. The URL is remembered in the settings (`server_url`, read from the view when they are
saved). After a baseline the status line counts down to the first numbers, once a second.
`export_commands` gives the vLLM and SGLang commands for the current model and decoding
settings (`specdec_core.serving.serve`), which `open_export` shows (File ▸ Export to server…); the
window adds the tab.

Below the commands, the dialog writes the EAGLE head the method drafts with for the chosen
engine: `write_head` asks the engine (`Engine.export_head`, in the engine process by default)
in a `TaskWorker`, off the GUI thread, and hands the dialog the command serving the folder or
the one line saying why nothing was written. A method without a head gets its reason instead
(named as the Method box names it); while a run, a measurement or a load holds the engine the
writing is refused in one line.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QElapsedTimer, QObject, QTimer, Slot

from app.engine_api import HEAD_KINDS, Engine, HeadExportRequest, ServeCheckRequest, no_head
from app.jobs import JobRunner
from app.method_style import MethodStyle
from app.server_worker import ServerWorker
from app.session import Activity, Session
from app.widgets.decoding_panel import DecodingPanel
from app.widgets.models_panel import ModelsPanel
from app.widgets.server_export_dialog import (
    CheckDone,
    HeadDone,
    HeadExportSource,
    ServerExportDialog,
)
from app.widgets.server_view import ServerView
from app.worker import Job, TaskWorker
from specdec_core.decoding.config import DecodeConfig
from specdec_core.errors import SpecdecError
from specdec_core.serving.export import ENGINES, METHOD_MAP
from specdec_core.serving.serve import serve_command, tensor_parallel_size
from specdec_core.serving.server_metrics import RESET, MetricsPoller

if TYPE_CHECKING:
    from specdec_core.serving.serve import ServeCommand
    from specdec_core.serving.server_metrics import Poll

WAIT_FOR_RUN = "wait until the run or measurement ends, then write the head"
WAIT_FOR_LOAD = "wait until the model has loaded, then write the head"
WAIT_FOR_RUN_CHECK = "wait until the run or measurement ends, then check with vLLM"
WAIT_FOR_LOAD_CHECK = "wait until the model has loaded, then check with vLLM"


class ServerController(QObject):
    def __init__(
        self,
        session: Session,
        engine: Engine,
        url: str,
        jobs: JobRunner,
        save: Callable[[], None],
        decoding: DecodingPanel,
        models: ModelsPanel,
        parent: QObject | None = None,
        prompt: Callable[[], tuple[str, bool]] = lambda: ("", False),
    ) -> None:
        """`engine`: writes the head for a server; `url`: the server to watch, as last saved;
        `save()` saves the settings (a URL polled is remembered); `decoding` and `models`:
        what Export to server… serves; `prompt()`: the window's prompt and whether it goes
        raw (no chat template), for Check with vLLM here."""
        super().__init__(parent)
        self.session = session
        self.engine = engine
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
        self.countdown = QTimer(self)  # the status line's countdown after a baseline
        self.countdown.setInterval(1000)
        self.countdown.timeout.connect(self._count_down)
        self._since_poll = QElapsedTimer()
        self.prompt = prompt
        self.export_dialog: ServerExportDialog | None = None
        self.check_job: Job | None = None  # Check with vLLM here
        self.head_job: Job | None = None  # writing a head for a server
        self._head_done: HeadDone | None = None
        session.on_change(self._on_session_change)
        self._on_session_change("result:run")

    @property
    def running(self) -> bool:
        return self.job is not None

    def url(self) -> str:
        return self.view.url.text()

    def open_export(self) -> ServerExportDialog:
        """The vLLM and SGLang commands for the current model and decoding settings, and the
        head to write for a server (or why this method has none)."""
        loaded, models = self.session.target, self.models
        method, config = self.decoding.method_name(), self.decoding.config()
        target, specs = models.target.spec() or "embedded", models.specs()
        dtype = models.dtype.currentText()
        gpus = tensor_parallel_size(loaded.device if loaded is not None else None)
        commands = export_commands(method, config, target, specs, dtype, gpus)

        def request(engine: str, folder: Path) -> HeadExportRequest:
            return HeadExportRequest(
                engine, str(folder), method, config, target, specs, dtype, gpus
            )

        self.export_dialog = ServerExportDialog(
            commands,
            parent=self.view.window(),
            head=self._head_source(method, specs, request),
            config=config,
            checker=ServingCheck(self, method, config, specs),
        )
        self.export_dialog.open()
        return self.export_dialog

    def _head_source(
        self, method: str, specs: dict[str, str], request: Callable[[str, Path], HeadExportRequest]
    ) -> HeadExportSource | str | None:
        """The head `method` drafts with and its writer; why it has none; None before the
        engine has said which methods there are."""
        registries = self.session.registries
        info = registries.method(method) if registries is not None else None
        if info is None:
            return None
        if info.needs not in HEAD_KINDS:
            return no_head(info.label)

        def write(engine: str, folder: Path, done: HeadDone) -> None:
            self.write_head(request(engine, folder), done)

        return HeadExportSource(specs.get(info.needs) or "embedded", write)

    def check_serving(
        self, request: ServeCheckRequest, progress: Callable[[str], None], done: CheckDone
    ) -> bool:
        """Run the serving check in a worker, the window measuring meanwhile (Stop and Esc
        reach it); `done` later hears its result or the error's line (at once, the reason,
        when it cannot start)."""
        if self.check_job is not None or self.session.busy:
            loading = self.session.activity in (Activity.LOADING, Activity.STARTING)
            done(WAIT_FOR_LOAD_CHECK if loading else WAIT_FOR_RUN_CHECK)
            return False
        if self.session.target is None:
            done("load a model first (Models ▸ Load), then check it with vLLM")
            return False
        if not request.prompt.strip():
            done("type a prompt in the window first: the check sends it to vLLM")
            return False
        engine = self.engine
        worker = TaskWorker(
            lambda progress, stop: engine.serve_check(request, progress, stop),
            stoppable=True,
            what="serving check",
        )
        worker.progress.connect(lambda message, _fraction: progress(message))
        worker.result.connect(done)
        worker.errored.connect(lambda message, _user: done(message))
        worker.done.connect(self._on_check_done)
        self.session.begin(Activity.MEASURING)
        self.check_job = self.jobs.start(worker)
        return True

    @property
    def checking(self) -> bool:
        return self.check_job is not None

    def stop_check(self) -> None:
        if self.check_job is not None:
            self.check_job.stop()

    @Slot()
    def _on_check_done(self) -> None:
        self.check_job = None
        self.session.end()

    def write_head(self, request: HeadExportRequest, done: HeadDone) -> bool:
        """Ask the engine to write the head in a worker; `done` later hears the command
        serving the folder or the error's line (at once, the reason, when it cannot start)."""
        if self.head_job is not None or self.session.busy:
            loading = self.session.activity in (Activity.LOADING, Activity.STARTING)
            done(WAIT_FOR_LOAD if loading else WAIT_FOR_RUN)
            return False
        engine = self.engine
        worker = TaskWorker(lambda progress: engine.export_head(request), what="head export")
        worker.result.connect(self._on_head_written)
        worker.errored.connect(self._on_head_failed)
        worker.done.connect(self._on_head_job_done)
        self._head_done = done
        self.head_job = self.jobs.start(worker)
        return True

    @Slot(object)
    def _on_head_written(self, command: object) -> None:
        if self._head_done is not None:
            self._head_done(command)

    @Slot(str, bool)
    def _on_head_failed(self, message: str, user: bool) -> None:
        if self._head_done is not None:
            self._head_done(message)
        if not user:  # a failure of the engine (its process ended): the dialog offers Restart
            self.session.report(message, user=False)

    @Slot()
    def _on_head_job_done(self) -> None:
        self.head_job, self._head_done = None, None

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
        self.view.status.setText(poll.line())
        self._since_poll.start()
        if poll.wait is None:
            self.countdown.stop()
        else:
            self.countdown.start()
        if poll.state == RESET:
            self.view.restarted()
        if poll.interval is not None:
            self.view.add_interval(poll.interval)

    @Slot()
    def _count_down(self) -> None:
        poll = self.last_poll
        if poll is None or poll.wait is None or self.job is None:
            self.countdown.stop()
            return
        remaining = poll.wait - self._since_poll.elapsed() / 1000
        self.view.status.setText(poll.line(remaining))
        if remaining <= 0:
            self.countdown.stop()

    @Slot(str, bool)
    def _on_error(self, message: str, user: bool) -> None:
        self.countdown.stop()
        self.failed = True
        self.view.status.setText(f"polling stopped: {message}")

    @Slot()
    def _on_done(self) -> None:
        self.countdown.stop()
        self.job = None
        self.view.set_running(False)
        if not self.failed:
            self.view.status.setText(f"stopped after {self.polls} polls")

    def _on_session_change(self, what: str) -> None:
        """A finished speculative run is the playground's measurement to compare with (the
        autoregressive reference that follows a Generate is not)."""
        summary = self.session.last_results.get("run") if what == "result:run" else None
        if summary is not None and summary.method != "ar":
            self.view.set_playground(summary, MethodStyle(self.session).color(summary.method))


def export_commands(
    method: str,
    config: DecodeConfig,
    target: str,
    specs: dict[str, str],
    dtype: str,
    tensor_parallel: int = 1,
) -> dict[str, ServeCommand | str]:
    """engine -> the server command for this setting on `tensor_parallel` GPUs, or why it
    cannot be served."""
    needs = METHOD_MAP.get(method, (None,))[0]
    model = specs.get(needs, "") if needs else ""
    commands: dict[str, ServeCommand | str] = {}
    for engine in ENGINES:
        try:
            commands[engine] = serve_command(
                engine, method, config, target, model, dtype, tensor_parallel
            )
        except SpecdecError as error:
            commands[engine] = f"cannot serve this setting: {error}"
    return commands


class ServingCheck:
    """Check with vLLM here for the setting the export dialog shows (`ServeChecker`)."""

    def __init__(
        self,
        controller: ServerController,
        method: str,
        config: DecodeConfig,
        specs: dict[str, str],
    ) -> None:
        self.controller = controller
        self.method, self.config, self.specs = method, config, specs

    def start(self, progress: Callable[[str], None], done: CheckDone) -> bool:
        text, raw = self.controller.prompt()
        request = ServeCheckRequest(self.method, self.config, text, self.specs, raw)
        return self.controller.check_serving(request, progress, done)

    def stop(self) -> None:
        self.controller.stop_check()
