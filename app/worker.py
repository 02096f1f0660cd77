"""Background work: a QObject moved to a QThread, one signal per engine event.

The pattern of superqt's `new_worker_qthread` / `GeneratorWorker`: the worker iterates a
generator in its thread and emits signals; the window connects to them (queued, so slots run
in the GUI thread); the worker never touches a widget. Stop sets a `threading.Event` that the
engine checks between steps; if the stream yields another Step after Stop was seen, the
worker closes it, so Stop always takes effect within one step. Exceptions become `errored`.

A run's worker may also measure the finished run's distance from the target's distribution
(`EventWorker(measure=...)`): after the run, in the same thread, so that nothing else runs on
the models meanwhile. A lossy run costs one more decode, untimed (`measuring` says so first,
and Stop ends it: no distance); a lossless one is at 0 at no cost.
"""

from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from PySide6.QtCore import QObject, QThread, Signal, Slot

from app.engine_api import Progress, StopFlag
from specdec_core.decoding.events import Event, Finished, RunSummary, Started, Step
from specdec_core.errors import SpecdecError, is_out_of_memory, out_of_memory
from specdec_core.measurement.run_distance import RunDistance

log = logging.getLogger(__name__)


def error_message(error: Exception, what: str) -> tuple[str, bool]:
    """How an exception of `what` reads to the user, and whether the user caused it (a
    `SpecdecError`, or running out of memory: both say what to change). Logged unless it is
    the user's."""
    if isinstance(error, SpecdecError):
        return str(error), True
    if is_out_of_memory(error):  # the window stays usable; say what to change
        log.warning("%s ran out of memory: %s", what, error)
        return str(out_of_memory(f"during the {what}")), True
    log.error("%s failed:\n%s", what, traceback.format_exc())
    return f"{type(error).__name__}: {error}", False


@contextmanager
def errors_to_signal(errored: Signal, what: str) -> Iterator[None]:
    """Turn an exception into `errored(message, is_user_error)`; the window stays alive."""
    try:
        yield
    except Exception as error:  # a bug or a library failure: show it, keep the window alive
        errored.emit(*error_message(error, what))


EventSource = Callable[[StopFlag, Progress], Iterator[Event]]
Measure = Callable[[RunSummary, StopFlag], RunDistance | None]  # a finished run's distance
MEASURING_DISTANCE = (
    "measuring the lossy run's distance from the target's distribution (one more decode, untimed)…"
)


class Worker(QObject):
    """A job body for a QThread: `work` runs `_run` there; an exception becomes `errored`
    (message, is a user error), and `done` always follows. `stop` sets `stop_flag`."""

    errored = Signal(str, bool)  # message, is a user error (SpecdecError)
    done = Signal()
    what = "work"  # names the job in the log

    def __init__(self) -> None:
        super().__init__()
        self.stop_flag = threading.Event()

    def stop(self) -> None:
        self.stop_flag.set()

    @Slot()
    def work(self) -> None:
        try:
            with errors_to_signal(self.errored, self.what):
                self._run()
        finally:
            self.done.emit()

    def _run(self) -> None:
        raise NotImplementedError


class EventWorker(Worker):
    """Runs one event stream; emits `started_run`, `stepped`, `finished_run`, then, with
    `measure`, `measuring` (a lossy run only) and `measured`, then `done`."""

    started_run = Signal(object)  # Started
    stepped = Signal(object)  # Step
    finished_run = Signal(object)  # Finished
    measuring = Signal(str)  # what the extra decode is, before it starts
    measured = Signal(object, object)  # RunSummary, RunDistance | None (not measured)
    progress = Signal(str, float)
    what = "run"

    def __init__(self, source: EventSource, measure: Measure | None = None) -> None:
        super().__init__()
        self._source = source
        self._measure = measure

    def _run(self) -> None:
        summary = self._iterate(self._source(self.stop_flag, self.progress.emit))
        if summary is not None and self._measure is not None:
            self.measured.emit(summary, self._distance(summary, self._measure))

    def _distance(self, summary: RunSummary, measure: Measure) -> RunDistance | None:
        """0 for a lossless run; none once Stop was pressed; else measured (one decode)."""
        if not summary.lossy:
            return RunDistance.lossless()
        if self.stop_flag.is_set():
            return None
        self.measuring.emit(MEASURING_DISTANCE)
        return measure(summary, self.stop_flag)

    def _iterate(self, stream: Iterator[Event]) -> RunSummary | None:
        """The stream to its Finished (whose summary it returns) or to Stop."""
        stopping = False
        try:
            for event in stream:
                if stopping and not isinstance(event, Finished):
                    break  # the engine ignored the flag for a whole step: abandon it
                self._emit(event)
                if isinstance(event, Finished):
                    return event.summary
                stopping = self.stop_flag.is_set()
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()
        return None

    def _emit(self, event: Event) -> None:
        if isinstance(event, Step):
            self.stepped.emit(event)
        elif isinstance(event, Started):
            self.started_run.emit(event)
        elif isinstance(event, Finished):
            self.finished_run.emit(event)


class TaskWorker(Worker):
    """Runs one callable (model loading, engine import) with progress; emits `result`.
    A `stoppable` task is called with the stop flag too (Cancel during a model load)."""

    result = Signal(object)
    progress = Signal(str, float)
    what = "task"

    def __init__(
        self, task: Callable[..., object], stoppable: bool = False, what: str = "task"
    ) -> None:
        super().__init__()
        self._task = task
        self._stoppable = stoppable
        self.what = what  # "model load", "adaptation": names the task in messages and the log

    def _run(self) -> None:
        args = (self.progress.emit, self.stop_flag) if self._stoppable else (self.progress.emit,)
        self.result.emit(self._task(*args))


class Job:
    """A worker and the QThread it lives in; the thread quits when the worker is done."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.thread = QThread()
        worker.moveToThread(self.thread)
        self.thread.started.connect(worker.work)
        worker.done.connect(self.thread.quit)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.worker.stop()

    def is_running(self) -> bool:
        return self.thread.isRunning()

    def shutdown(self, timeout_ms: int) -> bool:
        """Ask the worker to stop and wait for its thread; True if it ended."""
        self.worker.stop()
        self.thread.quit()
        return self.thread.wait(timeout_ms)
