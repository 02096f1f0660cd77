"""The Sweep tab and Run ▸ Tune k: what to measure, from the decoding panel and the prompt.

`SweepController` is given what it reads and nothing more: the `Session` (is the engine
free? errors and notes go there, and the window shows them), the engine (its `sweep` and
`tune` measure), the decoding panel (method, policy and fixed settings; a clicked cell and
the tuned k go back through its public `values()` / `apply()`), the current prompt and model
specs as callables, and the shared `JobRunner`. The window adds its tab and the Run ▸ Tune k
action. Every line the user reads names the method as the Method box does (its registry
label) and is worded by the view (`progress_words`, `show_result`, `show_tuned`).

Stop (the tab's button, Run ▸ Stop, Esc, the prompt box's Stop: all live while a sweep or Tune
runs) reaches the runs inside the point being measured, so the job ends within one decode
step: the points finished before it stay, and the one it cut short is marked on the map
("stopped") and named on the status line.

While a sweep or Tune runs, its line (the tab's, and the status line) says every second how
many points are done, which point is being measured and for how long, and the time left (from
the points done; "known after the first point" before one is). Tune measures on its own tuning
prompts (TUNING_PROMPTS, short runs), never the prompt box, and its line says so. A Tune that
Stop ends shows its partial table, the value it cut short and those never measured labelled.

Tune of a method parameter (the Sweep tab's "Tune" row; a method's own parameters are offered
first): the engine sweeps the parameter's `method_params.NAME` axis on the tuning prompts
(specdec_core/tuning/tune.py: the values, the short runs and the choice, as Tune k), and the
chosen value goes into `method_params` (app/method_params.py), which the sweeps and tunings
after it measure with and a run's config takes from `method_params.applied`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, QTimer, Slot
from PySide6.QtGui import QAction, QFont
from PySide6.QtWidgets import QMessageBox

from app.engine_api import Engine, SweepRequest, TuneRequest
from app.jobs import JobRunner
from app.method_params import MethodParams
from app.method_style import MethodStyle
from app.session import Activity, Session
from app.sweep_worker import SweepWorker
from app.widgets.decoding_panel import DecodingPanel
from app.widgets.sweep_view import (
    SweepView,
    param_words,
    point_words,
    progress_words,
    tuned_words,
)
from app.worker import Job
from specdec_core.decoding.config import DecodeConfig
from specdec_core.errors import SpecdecError
from specdec_core.measurement.sweep_records import (  # torch-free records
    METHOD_PREFIX,
    Grid,
    SweepResult,
    TuneResult,
    point_key,
)
from specdec_core.run.prompts import read_prompt_file
from specdec_core.tuning.tune import (
    TUNING_MAX_NEW_TOKENS,
    TUNING_PROMPTS,
    num_layers,
    param_axis,
    param_candidates,
    stopped_table,
    tunable_params,
    tune_grid,
    tune_result,
)

PROGRESS_MS = 1000  # the progress line's refresh while a point is measured

if TYPE_CHECKING:
    from specdec_core.measurement.sweep_records import SweepProgress


@dataclass(frozen=True)
class ParamTuning:
    """A Tune of a method parameter in flight: the sweep that measures it, and what it keeps
    when Stop cuts it short."""

    method: str
    param: str
    grid: Grid
    given: float | None  # the value before Tune (None: the method's default)


class SweepController(QObject):
    def __init__(
        self,
        session: Session,
        engine: Engine,
        decoding: DecodingPanel,
        prompt_text: Callable[[], str],
        specs: Callable[[], dict[str, str]],
        jobs: JobRunner,
        parent: QObject | None = None,
        method_params: MethodParams | None = None,
    ) -> None:
        super().__init__(parent)
        self.session = session
        self.decoding = decoding
        self.prompt_text = prompt_text
        self.specs = specs
        self.jobs = jobs
        self.engine = engine
        self.view = SweepView()
        self.tune_action = QAction("&Tune k", self)
        self.tune_action.setToolTip(
            "measure k, or what the Sweep tab's Tune row names, on this device and set the fastest"
        )
        self.tune_action.setShortcut("Ctrl+T")
        self.job: Job | None = None
        self.kind = ""  # "sweep" or "tune" while a job runs
        self.grid: Grid | None = None  # the grid of the sweep running or last run
        self.stopping = False  # Stop was pressed during the job
        self.style = MethodStyle(session)
        self.label = ""  # the method measured, as the Method box names it
        self.result_box: QMessageBox | None = None
        self.last_result: SweepResult | TuneResult | None = None
        # what Tune chose for a method's own parameters (shared with the runs' inputs)
        self.method_params = method_params if method_params is not None else MethodParams()
        self.tuning: ParamTuning | None = None  # a Tune of a method parameter, while it runs
        # the progress of the job running: what it is, its points in order, how far it is
        self.doing = ""
        self.points: list[dict[str, Any]] = []
        self.done = 0
        self.eta: float | None = None
        self.began = self.point_began = 0.0
        self.progress_timer = QTimer(self, interval=PROGRESS_MS)
        self.progress_timer.timeout.connect(self.show_progress)
        self.view.run_requested.connect(self.run_sweep)
        self.view.stop_requested.connect(self.stop)
        self.view.apply_requested.connect(self.apply_settings)
        self.tune_action.triggered.connect(self.tune)
        decoding.method_changed.connect(self.offer_tuning)
        self.offer_tuning(decoding.method_name())

    @property
    def running(self) -> bool:
        return self.job is not None

    # -- inputs ---------------------------------------------------------------------------------
    def _can_start(self) -> bool:
        if self.running:
            return False
        if not self.session.ready():
            self.session.report("wait until the model is loaded and no run is in progress")
            return False
        return True

    def _method(self) -> tuple[str, bool]:
        method = self.decoding.method_name()
        if not method or method == "ar":
            raise SpecdecError("choose a speculative method in the Decoding panel first")
        registries = self.session.registries
        info = registries.method(method) if registries is not None else None
        return method, bool(info and info.tree)

    @Slot(str)
    def offer_tuning(self, method: str) -> None:
        """The Tune row for `method`: its own parameters first, then its k or tree size."""
        registries = self.session.registries
        info = registries.method(method) if registries is not None and method else None
        if info is None:
            self.view.set_tunable((), tree=False)
            return
        self.view.set_tunable(tunable_params(method, info.params), tree=info.tree, k=info.k)

    def _config(self, method: str) -> DecodeConfig:
        """The decoding panel's settings with the method parameters chosen for `method`."""
        return self.method_params.applied(method, self.decoding.config())

    def _policy_param(self) -> str | None:
        """The first parameter of the chosen lossy policy (its threshold), if it has one."""
        decoding = self.decoding
        return next(iter(decoding.params), None) if decoding.is_lossy() else None

    def _prompts(self) -> list[str]:
        if self.view.uses_file():
            path = self.view.prompt_file.text().strip()
            if not path:
                raise SpecdecError("choose a JSONL prompt file, or sweep the current prompt")
            return read_prompt_file(path)
        text = self.prompt_text().strip()
        if not text:
            raise SpecdecError("the prompt is empty; type one or choose a JSONL prompt file")
        return [text]

    # -- sweep ----------------------------------------------------------------------------------
    def run_sweep(self) -> bool:
        if not self._can_start():
            return False
        try:
            method, tree = self._method()
            axes = self.view.grid_axes(tree, self._policy_param())
            grid = Grid(axes)
            prompts = self._prompts()
        except SpecdecError as error:
            self.session.report(str(error))
            return False
        request = SweepRequest(method, grid, self._config(method), tuple(prompts), self.specs())
        engine = self.engine
        self.grid = grid
        self.view.begin(axes)
        self.label = self.style.label(method)
        self._start("sweep", lambda on_point, stop: engine.sweep(request, on_point, stop))
        self._follow(f"sweeping {self.label}", grid.points())
        return True

    # -- tune -----------------------------------------------------------------------------------
    def tune(self) -> bool:
        if not self._can_start():
            return False
        try:
            method, tree = self._method()
        except SpecdecError as error:
            self.session.report(str(error))
            return False
        param = self.view.tuned_param()
        engine = self.engine
        self.label = self.style.label(method)
        if param is not None:
            try:
                request = self._param_request(method, param)
            except SpecdecError as error:
                self.session.report(str(error))
                return False
            task = partial(engine.sweep, request)
            self.grid = request.grid
        else:
            task = partial(engine.tune, TuneRequest(method, self._config(method), self.specs()))
            self.grid = tune_grid(tree)  # the engine's Tune measures this grid, in this order
        self._start("tune", task)
        tuned = tuned_words(tree, param)  # a tree has no k: its size instead
        doing = f"tuning {tuned} for {self.label} on {len(TUNING_PROMPTS)} tuning prompts"
        self._follow(doing, self.grid.points())
        return True

    def _param_request(self, method: str, param: str) -> SweepRequest:
        """The sweep that tunes `method`'s parameter `param`: its candidate values on the
        tuning prompts, short runs, everything else as set."""
        target = self.session.target
        values = param_candidates(method, param, num_layers(target.config) if target else None)
        grid = Grid({param_axis(param): values})
        config = self._config(method)
        short = replace(config, max_new_tokens=min(config.max_new_tokens, TUNING_MAX_NEW_TOKENS))
        self.tuning = ParamTuning(method, param, grid, config.method_params.get(param))
        return SweepRequest(method, grid, short, TUNING_PROMPTS, self.specs())

    # -- jobs -----------------------------------------------------------------------------------
    def _start(self, kind: str, task) -> None:
        worker = SweepWorker(task)
        worker.pointed.connect(self._on_point)
        worker.result.connect(self.show_result)
        worker.errored.connect(self._on_error)
        worker.done.connect(self._on_done)
        self.kind, self.stopping = kind, False
        self.session.begin(Activity.MEASURING)
        self.job = self.jobs.start(worker)
        self.view.set_running(True)
        self.tune_action.setEnabled(False)

    def _follow(self, doing: str, points: list[dict[str, Any]]) -> None:
        """Show the progress of the job just started: `doing`, over `points` in order."""
        self.doing, self.points, self.done, self.eta = doing, points, 0, None
        self.began = self.point_began = time.monotonic()
        self.progress_timer.start()
        self.show_progress()

    def progress_line(self) -> str:
        """Points done of all, the point measured and for how long, the time left."""
        done = self.done
        measuring = self.points[done] if done < len(self.points) else None
        now = time.monotonic()
        eta = self.eta
        if eta is None and done:  # the engine gave none: from the points done here
            eta = (now - self.began) / done * (len(self.points) - done)
        return progress_words(
            self.doing, done, len(self.points), measuring, now - self.point_began, eta
        )

    def show_progress(self) -> None:
        if self.job is None or self.stopping:
            self.progress_timer.stop()
            return
        line = self.progress_line()
        self.view.status.setText(line)
        self.session.report(line, error=False)

    def stop(self) -> None:
        """End the job within one decode step; the points finished so far stay."""
        if self.job is not None:
            self.job.stop()
            self.progress_timer.stop()
            self.stopping = True
            self.view.status.setText("stopping…")
            self.session.report("stopping…", error=False)

    @Slot(object)
    def _on_point(self, progress: SweepProgress) -> None:
        self.done, self.eta = progress.done, progress.eta_seconds
        self.point_began = time.monotonic()
        self.show_progress()
        if self.kind == "sweep":
            self.view.add_record(progress.record)

    @Slot(object)
    def show_result(self, result: object) -> None:
        """A sweep or Tune result, as the engine sent it back: the map, the line, the k; the
        method named as the Method box names it."""
        tuning, self.tuning = self.tuning, None
        if tuning is not None and isinstance(result, SweepResult):  # Tune of a parameter
            result = tune_result(
                tuning.method, param_axis(tuning.param), tuning.grid, result.points, tuning.given
            )
        self.last_result = result
        self.session.keep(self.kind or _kind(result), result)
        if isinstance(result, TuneResult):
            label = self.style.label(result.method)
            self.view.show_tuned(result, label)
            if result.stopped:  # a partial table picks no k; the reason names the value cut
                self.view.status.setToolTip(result.reason)  # short by Stop
                self.session.report(self.view.status.text(), error=False)
                self._show_table(result, label)
            elif result.setting.startswith(METHOD_PREFIX):
                name = result.setting.removeprefix(METHOD_PREFIX)
                self.method_params.set(result.method, name, result.k)
                self.session.report(self.view.status.text(), error=False)
                self._show_table(result, label)
            else:
                self.apply_settings({result.setting: result.k})
                self._show_table(result, label)
        elif isinstance(result, SweepResult):
            for record in result.points:
                self.view.add_record(record)
            label = self.style.label(str(result.header.get("method", "")))
            cut = self._interrupted(result)
            if cut is not None:
                self.view.mark_stopped(cut)
            self.view.show_result(result.points, label, cut)
            if cut is not None:
                self.session.report(self.view.status.text(), error=False)

    def _interrupted(self, result: SweepResult) -> dict[str, Any] | None:
        """The point a Stop cut short: the first of the grid the result lacks."""
        if not self.stopping or self.grid is None:
            return None
        done = {point_key(p.point) for p in result.points}
        return next((dict(p) for p in self.grid.points() if point_key(p) not in done), None)

    def _show_table(self, result: TuneResult, label: str) -> None:
        line = self.view.status.text()
        tuned = "the tree size" if result.setting == "tree_tokens" else "k"
        if result.setting.startswith(METHOD_PREFIX):
            tuned = param_words(result.setting.removeprefix(METHOD_PREFIX))
        table = result.format_table()
        if result.stopped and self.grid is not None:  # partial: what was cut, what never ran
            table = stopped_table(result, self.grid)
        prompts = f"measured on {len(TUNING_PROMPTS)} tuning prompts, not the prompt box"
        self.result_box = QMessageBox(
            QMessageBox.Icon.Information,
            f"Tune {tuned}{' stopped' if result.stopped else ''}: {label}",
            f"{line}\n({prompts})\n\n{table}",
            parent=self.view,
        )
        self.result_box.setFont(QFont("monospace"))
        self.result_box.open()

    @Slot(str, bool)
    def _on_error(self, message: str, user: bool) -> None:
        self.tuning = None
        self.view.status.setText(message)
        self.session.report(message, user=user)

    @Slot()
    def _on_done(self) -> None:
        self.progress_timer.stop()
        self.job, self.kind = None, ""
        self.session.end()
        self.view.set_running(False)
        self.tune_action.setEnabled(True)

    # -- sliders --------------------------------------------------------------------------------
    @Slot(dict)
    def apply_settings(self, settings: dict[str, Any]) -> None:
        """Set k / temperature / tree size / a policy parameter on the decoding panel."""
        decoding = self.decoding
        values = decoding.values()
        values.update({k: v for k, v in settings.items() if k in values})
        decoding.apply(values)
        for name, value in settings.items():
            spin = decoding.params.get(name.removeprefix("policy_params."))
            if name.startswith("policy_params.") and spin is not None:
                spin.setValue(float(value))
        self.session.report(f"applied {point_words(settings)}", error=False)


def _kind(result: object) -> str:
    """Which kind of result the Session keeps it as: 'tune' or 'sweep'."""
    return "tune" if isinstance(result, TuneResult) else "sweep"
