"""Runs and background tasks (engine import, model load), one at a time, on the `JobRunner`.

Runs execute one after another (Compare is a queue of several, Generate and a chat turn a
queue of one), so the models are never used by two threads at once. Whoever starts a queue is
its `RunOwner` and hears the events of its own requests, and only those: the Generate, Compare
and chat controllers draw their own runs. The worker's signals reach this QObject's slots in
the GUI thread (queued). What is running is written to the `Session`, which the window
observes; an error of a run is reported there too.

A run's autoregressive reference is a *background* request (`run_background`): asked for while
its queue runs, it starts once the queue has ended and the session is idle again, so the
window is ready for the next action while the reference decodes (`measuring_reference`). It
is the first thing to give way: whatever begins next (a run queue, a task here, or anything
else that marks the session busy: a sweep, Tune, an adaptation, a serving check) stops it, as
Stop stops a run (the engine's stop flag ends it within a step), and a queue or task of this
controller starts once it has ended (the engine runs one request at a time). Stop (Esc) stops
it too. `settled` says that a queue and its reference, if any, have ended with nothing waiting.

Each finished run of a queue is then `measured`: its distance from the target's distribution,
with the run and its summary (`Engine.distance`, in the run's worker, before the next run of
the queue: a lossy run costs one more decode, announced by `measuring`; a lossless one is at 0
at once).
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
CANCELLED = "cancelled: the next action began first"  # a background reference that never ran


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
    settled = Signal()  # a queue and its background reference ended, nothing waits
    background_changed = Signal()  # a background reference started or ended
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
        self._task_worker: TaskWorker | None = None  # a task waiting for the reference to end
        # the background reference: asked for during a queue, then running
        self._asked: tuple[RunRequest, RunOwner] | None = None
        self.background: tuple[RunRequest, RunOwner] | None = None
        self.background_job: Job | None = None
        self._when_ended: Callable[[], None] | None = None  # starts once the reference ended
        session.on_change(self._on_session_change)

    # -- state ----------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        """A run queue is under way (or waits for a background reference to end)."""
        return self.run_job is not None or self._owner is not None

    @property
    def task_running(self) -> bool:
        return self._task_job is not None or self._task_worker is not None

    @property
    def measuring_reference(self) -> bool:
        """A background reference runs (the window is ready meanwhile)."""
        return self.background_job is not None

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
        self._asked = None  # a reference asked for by the queue before is not wanted now
        self.session.begin(Activity.RUNNING, compare=compare)  # stops a background reference
        self._after_reference(self._next)
        return True

    def run_background(self, request: RunRequest, owner: RunOwner) -> None:
        """Run `request` in the background once the queue under way has ended (at once when
        none is), its events to `owner`: the session stays idle meanwhile, and whatever begins
        next stops it (`owner` then hears it finish as stopped). A later call replaces an
        earlier one that has not started."""
        if self.running:
            self._asked = (request, owner)
        elif not self.session.busy and self.background_job is None:
            self._start_background(request, owner)

    def stop_reference(self) -> None:
        """Stop a background reference (it ends within a step), or drop one asked for that
        has not started; nothing else."""
        self._drop_asked()
        if self.background_job is not None:
            self.background_job.stop()

    def _drop_asked(self) -> None:
        """A reference asked for will not run: its owner hears it failed (nothing reported)."""
        asked, self._asked = self._asked, None
        if asked is not None:
            request, owner = asked
            owner.failed(request, CANCELLED, True)

    def stop(self) -> None:
        """Stop the queue under way and a background reference."""
        self._queue.clear()
        if self.run_job is not None:
            self.run_job.stop()
        self.stop_reference()

    def _next(self) -> None:
        if not self._queue:
            self.current, self._owner = None, None
            self.session.end()
            self.queue_done.emit()
            asked, self._asked = self._asked, None
            if self.session.busy or self.running:  # something began at once: it runs first
                self._asked = asked
                self._drop_asked()
            elif asked is not None:
                self._start_background(*asked)
            else:
                self.settled.emit()
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

    # -- the background reference -------------------------------------------------------------
    def _on_session_change(self, what: str) -> None:
        """Anything that begins stops the background reference first."""
        if what == "activity" and self.session.busy:
            self.stop_reference()

    def _after_reference(self, start: Callable[[], None]) -> None:
        """`start()` now, or once the background reference (stopped already) has ended."""
        if self.background_job is None:
            start()
        else:
            self.background_job.stop()
            self._when_ended = start

    def _start_background(self, request: RunRequest, owner: RunOwner) -> None:
        engine = self.engine
        worker = EventWorker(lambda stop, progress: engine.events(request, stop, progress))
        worker.started_run.connect(self._on_background_started)
        worker.stepped.connect(self._on_background_step)
        worker.finished_run.connect(self._on_background_finished)
        worker.errored.connect(self._on_background_error)
        worker.done.connect(self._on_background_done)
        self.background = (request, owner)
        self.background_job = self.jobs.start(worker)
        self.background_changed.emit()
        owner.begun(request)

    def _background_owner(self) -> tuple[RunRequest, RunOwner]:
        assert self.background is not None, "a background event without a background run"
        return self.background

    @Slot(object)
    def _on_background_started(self, started: Started) -> None:
        request, owner = self._background_owner()
        owner.started(request, started)

    @Slot(object)
    def _on_background_step(self, step: Step) -> None:
        request, owner = self._background_owner()
        owner.stepped(request, step)

    @Slot(object)
    def _on_background_finished(self, event: Finished) -> None:
        request, owner = self._background_owner()
        self.session.keep("run", event.summary)
        owner.finished(request, event.summary)
        self.finished.emit(event.summary)

    @Slot(str, bool)
    def _on_background_error(self, message: str, user: bool) -> None:
        request, owner = self._background_owner()
        owner.failed(request, message, user)
        self.session.report(message, user=user)

    @Slot()
    def _on_background_done(self) -> None:
        self.background_job, self.background = None, None
        self.background_changed.emit()
        start, self._when_ended = self._when_ended, None
        if start is not None:
            start()
        elif not self.session.busy and not self.running:
            self.settled.emit()

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
        self._task_worker = worker
        self.session.begin(activity)  # stops a background reference
        self._after_reference(self._start_task)
        return True

    def _start_task(self) -> None:
        worker, self._task_worker = self._task_worker, None
        if worker is not None:
            self._task_job = self.jobs.start(worker)

    def cancel_task(self) -> None:
        """Ask a stoppable task (a model load) to stop at its next check."""
        if self._task_worker is not None:
            self._task_worker.stop()  # it stops at its first check once it starts
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
        self._asked, self._when_ended = None, None
        return self.jobs.shutdown(timeout_ms)
