"""Owns the worker threads: one background task (engine import, model load) and a queue of runs.

Runs execute one after another (Generate is a queue of one, Compare a queue of several), so
the models are never used by two threads at once. Worker signals are connected to slots of
this QObject, which lives in the GUI thread, so every re-emitted signal arrives there.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, Signal, Slot

from app.engine import Engine, RunRequest
from app.worker import EventWorker, Job, TaskWorker, Worker
from specdec_core.events import Finished


class RunController(QObject):
    run_begun = Signal(object)  # RunRequest
    started = Signal(object)  # Started
    stepped = Signal(object)  # Step
    finished = Signal(object)  # RunSummary
    progress = Signal(str, float)
    errored = Signal(str, bool)  # message, user error
    queue_done = Signal()
    task_progress = Signal(str, float)
    task_failed = Signal(str, bool)
    task_done = Signal()

    def __init__(self, engine: Engine, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.engine = engine
        self.current: RunRequest | None = None
        self._queue: list[RunRequest] = []
        self._keep_going = False
        self._run_job: Job | None = None
        self._task_job: Job | None = None
        self._on_result: Callable[[object], None] | None = None
        self._result: tuple[object] | None = None
        self._jobs: list[Job] = []  # kept alive until their thread has finished

    # -- state ----------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._run_job is not None

    @property
    def task_running(self) -> bool:
        return self._task_job is not None

    def live_threads(self) -> int:
        return sum(job.is_running() for job in self._jobs)

    # -- runs ------------------------------------------------------------------------------
    def run_queue(self, requests: list[RunRequest], keep_going: bool = False) -> bool:
        """Run `requests` one after another; `keep_going`: an error skips only that run."""
        if self.running or not requests:
            return False
        self._queue = list(requests)
        self._keep_going = keep_going
        self._next()
        return True

    def stop(self) -> None:
        self._queue.clear()
        if self._run_job is not None:
            self._run_job.stop()

    def _next(self) -> None:
        if not self._queue:
            self.current = None
            self.queue_done.emit()
            return
        request = self._queue.pop(0)
        self.current = request
        engine = self.engine
        worker = EventWorker(lambda stop, progress: engine.events(request, stop, progress))
        worker.started_run.connect(self._on_started)
        worker.stepped.connect(self._on_step)
        worker.finished_run.connect(self._on_finished)
        worker.progress.connect(self._on_progress)
        worker.errored.connect(self._on_error)
        worker.done.connect(self._on_run_done)
        self._run_job = self._start(worker)
        self.run_begun.emit(request)

    @Slot(object)
    def _on_started(self, event: object) -> None:
        self.started.emit(event)

    @Slot(object)
    def _on_step(self, step: object) -> None:
        self.stepped.emit(step)

    @Slot(object)
    def _on_finished(self, event: Finished) -> None:
        self.finished.emit(event.summary)

    @Slot(str, float)
    def _on_progress(self, message: str, fraction: float) -> None:
        self.progress.emit(message, fraction)

    @Slot(str, bool)
    def _on_error(self, message: str, user: bool) -> None:
        if not self._keep_going:
            self._queue.clear()
        self.errored.emit(message, user)

    @Slot()
    def _on_run_done(self) -> None:
        self._run_job = None
        self._next()

    # -- background tasks -----------------------------------------------------------------
    def run_task(
        self, task: Callable[[Callable[[str, float], None]], object], on_result: Callable
    ) -> bool:
        if self.task_running:
            return False
        worker = TaskWorker(task)
        self._on_result = on_result
        worker.result.connect(self._on_task_result)
        worker.progress.connect(self._on_task_progress)
        worker.errored.connect(self._on_task_error)
        worker.done.connect(self._on_task_done)
        self._task_job = self._start(worker)
        return True

    @Slot(object)
    def _on_task_result(self, result: object) -> None:
        self._result = (result,)

    @Slot(str, float)
    def _on_task_progress(self, message: str, fraction: float) -> None:
        self.task_progress.emit(message, fraction)

    @Slot(str, bool)
    def _on_task_error(self, message: str, user: bool) -> None:
        self.task_failed.emit(message, user)

    @Slot()
    def _on_task_done(self) -> None:
        self._task_job = None
        result, self._result = self._result, None
        callback, self._on_result = self._on_result, None
        if result is not None and callback is not None:
            callback(result[0])  # after clearing the job, so the callback may start another
        self.task_done.emit()

    # -- threads ----------------------------------------------------------------------------
    def _start(self, worker: Worker) -> Job:
        job = Job(worker)
        job.thread.finished.connect(self._reap)
        self._jobs.append(job)
        job.start()
        return job

    @Slot()
    def _reap(self) -> None:
        self._jobs = [job for job in self._jobs if job.is_running()]

    def shutdown(self, timeout_ms: int = 30_000) -> bool:
        """Stop everything and wait for the threads; True when none is left running."""
        self._queue.clear()
        ended = all(job.shutdown(timeout_ms) for job in list(self._jobs))
        self._reap()
        return ended
