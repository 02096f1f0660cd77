"""Runs and background tasks (engine import, model load), one at a time, on the `JobRunner`.

Runs execute one after another (Generate is a queue of one and its reference, Compare a queue
of several, a chat turn one and its reference), so the models are never used by two threads
at once. Whoever starts a queue is its `RunOwner` and hears the events of its own requests,
and only those: the Generate, Compare and chat controllers draw their own runs. The worker's
signals reach this QObject's slots in the GUI thread (queued). What is running is written to
the `Session`, which the window observes; an error of a run is reported there too.

Each finished run is then `measured`: its distance from the target's distribution, with the
run and its summary (`Engine.distance`, in the run's worker, before the next run of the queue:
a lossy run costs one more decode, announced by `measuring`; a lossless one is at 0 at once).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from PySide6.QtCore import QObject, Signal, Slot

from app.engine_api import Engine, RunRequest, engine_ended
from app.jobs import JobRunner
from app.session import Activity, Session
from app.worker import EventWorker, Job, TaskWorker
from specdec_core.decoding.events import Finished, RunSummary, Started, Step
from specdec_core.measurement.run_distance import RunDistance

TASK_NAMES = {Activity.STARTING: "engine start", Activity.LOADING: "model load"}


class RunOwner(Protocol):
    """The controller that started a run queue: each event of its requests, in order."""

    def begun(self, request: RunRequest) -> None:
        """The run's worker has started (its draft or head may load first)."""
        ...

    def started(self, request: RunRequest, started: Started) -> None:
        """The prompt's prefill comes before the first token."""

    def stepped(self, request: RunRequest, step: Step) -> None: ...

    def finished(self, request: RunRequest, summary: RunSummary) -> None: ...

    def failed(self, request: RunRequest, message: str, user: bool) -> None:
        """The run failed; the Session already reports the message to the user."""


class RunController(QObject):
    finished = Signal(object)  # RunSummary, of any run
    measuring = Signal(str)  # a lossy run's distance is being measured (one more decode)
    measured = Signal(object, object, object)  # RunRequest, RunSummary, RunDistance | None
    progress = Signal(str, float)  # of any run (a draft or head loading)
    queue_done = Signal()
    task_progress = Signal(str, float)
    task_failed = Signal(str, bool)
    task_done = Signal()

    def __init__(
        self,
        engine: Engine,
        session: Session,
        jobs: JobRunner | None = None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.engine = engine
        self.session = session
        self.jobs = jobs or JobRunner(self)
        self.current: RunRequest | None = None
        self._owner: RunOwner | None = None
        self._queue: list[RunRequest] = []
        self._keep_going = False
        self.run_job: Job | None = None
        self._task_job: Job | None = None
        self._on_result: Callable[[object], None] | None = None
        self._result: tuple[object] | None = None

    # -- state ----------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self.run_job is not None

    @property
    def task_running(self) -> bool:
        return self._task_job is not None

    def live_threads(self) -> int:
        return self.jobs.live_threads()

    # -- runs ------------------------------------------------------------------------------
    def run_queue(
        self,
        requests: list[RunRequest],
        owner: RunOwner,
        keep_going: bool = False,
        compare: bool = False,
    ) -> bool:
        """Run `requests` one after another, their events to `owner`; `keep_going`: an error
        skips only that run (the engine's death ends the queue all the same)."""
        if self.running or self.task_running or not requests:
            return False
        self._owner = owner
        self._queue = list(requests)
        self._keep_going = keep_going
        self.session.begin(Activity.RUNNING, compare=compare)
        self._next()
        return True

    def stop(self) -> None:
        self._queue.clear()
        if self.run_job is not None:
            self.run_job.stop()

    def _next(self) -> None:
        if not self._queue:
            self.current, self._owner = None, None
            self.session.end()
            self.queue_done.emit()
            return
        request = self._queue.pop(0)
        self.current = request
        engine = self.engine
        worker = EventWorker(
            lambda stop, progress: engine.events(request, stop, progress),
            lambda summary, stop: engine.distance(request, summary, stop),
        )
        worker.started_run.connect(self._on_started)
        worker.stepped.connect(self._on_step)
        worker.finished_run.connect(self._on_finished)
        worker.measuring.connect(self.measuring)
        worker.measured.connect(self._on_measured)
        worker.progress.connect(self.progress)
        worker.errored.connect(self._on_error)
        worker.done.connect(self._on_run_done)
        self.run_job = self.jobs.start(worker)
        self._owned().begun(request)

    def _owned(self) -> RunOwner:
        assert self._owner is not None, "a run event outside a run queue"
        return self._owner

    @Slot(object)
    def _on_started(self, started: Started) -> None:
        self._owned().started(self.current, started)

    @Slot(object)
    def _on_step(self, step: Step) -> None:
        self._owned().stepped(self.current, step)

    @Slot(object)
    def _on_finished(self, event: Finished) -> None:
        self.session.keep("run", event.summary)
        self._owned().finished(self.current, event.summary)
        self.finished.emit(event.summary)

    @Slot(object, object)
    def _on_measured(self, summary: RunSummary, distance: RunDistance | None) -> None:
        self.measured.emit(self.current, summary, distance)

    @Slot(str, bool)
    def _on_error(self, message: str, user: bool) -> None:
        if not self._keep_going or engine_ended(message):  # nothing runs on a dead engine
            self._queue.clear()
        self._owned().failed(self.current, message, user)
        self.session.report(message, user=user)

    @Slot()
    def _on_run_done(self) -> None:
        self.run_job = None
        self._next()

    # -- background tasks -----------------------------------------------------------------
    def run_task(
        self,
        task: Callable[..., object],
        on_result: Callable,
        activity: Activity = Activity.LOADING,
        stoppable: bool = False,
    ) -> bool:
        """`task(progress)`, or `task(progress, stop)` when `stoppable` (`cancel_task`)."""
        if self.task_running or self.running:
            return False
        worker = TaskWorker(task, stoppable, TASK_NAMES.get(activity, "task"))
        self._on_result = on_result
        worker.result.connect(self._on_task_result)
        worker.progress.connect(self.task_progress)
        worker.errored.connect(self.task_failed)
        worker.done.connect(self._on_task_done)
        self.session.begin(activity)
        self._task_job = self.jobs.start(worker)
        return True

    def cancel_task(self) -> None:
        """Ask a stoppable task (a model load) to stop at its next check."""
        if self._task_job is not None:
            self._task_job.stop()

    @Slot(object)
    def _on_task_result(self, result: object) -> None:
        self._result = (result,)

    @Slot()
    def _on_task_done(self) -> None:
        self._task_job = None
        self.session.end()
        result, self._result = self._result, None
        callback, self._on_result = self._on_result, None
        if result is not None and callback is not None:
            callback(result[0])  # after clearing the job, so the callback may start another
        self.task_done.emit()

    def shutdown(self, timeout_ms: int = 30_000) -> bool:
        """Stop everything and wait for the threads; True when none is left running."""
        self._queue.clear()
        return self.jobs.shutdown(timeout_ms)
