"""One owner of worker threads for every kind of background work (runs, loads, sweeps).

`JobRunner.start(worker)` moves a `Worker` (app/worker.py) to its own QThread and keeps the
`Job` alive until the thread has finished; `shutdown` asks every job to stop and waits for
its thread, so closing the window leaves no thread behind. Controllers decide *what* runs and
*when*; this is only the bookkeeping of threads, written once.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Slot

from app.worker import Job, Worker


class JobRunner(QObject):
    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._jobs: list[Job] = []  # kept alive until their thread has finished

    def start(self, worker: Worker) -> Job:
        job = Job(worker)
        job.thread.finished.connect(self._reap)
        self._jobs.append(job)
        job.start()
        return job

    def live_threads(self) -> int:
        return sum(job.is_running() for job in self._jobs)

    @Slot()
    def _reap(self) -> None:
        self._jobs = [job for job in self._jobs if job.is_running()]

    def shutdown(self, timeout_ms: int) -> bool:
        """Stop every job and wait for its thread; True when none is left running."""
        ended = all(job.shutdown(timeout_ms) for job in list(self._jobs))
        self._reap()
        return ended
