"""The engine in its own process, so that the window does not slow down what it measures.

In one process the GUI thread (painting, pyqtgraph) and the engine's worker thread share one
interpreter lock, and a run's tokens/s drops by 10-25 %. `ProcessEngine` implements the
`Engine` protocol (app/engine.py) by talking to a child process that holds a `SpecdecEngine`
and its models (loaded once per process). `ProcessBackend` runs sweeps and Tune there too.

The child is started with "spawn" (a fork of a process with Qt or torch threads is unsafe)
at the first call, and talks over one duplex `multiprocessing` Pipe, one request at a time:

- window -> engine: `(command, args)`; commands: registries, load_target, run, forget,
  sweep, tune, close. Arguments and results are the frozen dataclasses of app/engine.py,
  specdec_core.events, .sweep and .autotune (picklable).
- engine -> window, for each request: any number of `("progress", message, fraction)`,
  `("event", Started | Step | Finished)` and `("point", SweepProgress)`, then exactly one of
  `("result", value)` or `("error", type name, message, is a user error, traceback)`.
- Stop: a `multiprocessing.Event`, set from the window's stop flag while it waits for the next
  message and checked by the child between steps (and between sweep points). Closing the
  event generator early sets it too, then reads the run to its end, so the next request
  starts clean.

An error is raised again in the window's process as `SpecdecError` (a user error) or as an
`EngineProcessError` named like the original (`ValueError: …`), so the window shows the same
dialog as with the engine in-process. An engine process that ended without `close` (killed,
crashed, out of memory), whichever way the window meets it (a dead process, a broken pipe on
send, EOF on receive), is one `EngineProcessError`: it ended unexpectedly, its exit code, and
how to start it again; the request after that starts a fresh process. The child ends on
`close`, when the Pipe reaches EOF (the window's process is gone) and, as a daemon, when the
window's process exits.

Labels: `token_text` is called per token of every drafted tree, so it must not wait for the
child. `load_target` brings back the text of every token id with the `TargetInfo`, decoded
by the child's own `token_text`, and labels are looked up in that table.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import signal
import threading
import traceback
from collections.abc import Callable, Generator, Iterator
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from app.engine import (
    LoadSettings,
    Progress,
    Registries,
    RunRequest,
    SpecdecEngine,
    StopFlag,
    TargetInfo,
)
from app.sweep_backend import EngineBackend, OnPoint
from specdec_core.errors import SpecdecError
from specdec_core.events import Event, Step

if TYPE_CHECKING:  # torch-heavy: the window's process imports them only to read results
    from multiprocessing.synchronize import Event as SharedFlag

    from specdec_core.sweep_records import SweepResult, TuneResult

log = logging.getLogger(__name__)

POLL_SECONDS = 0.02  # how often a waiting request looks at the window's stop flag
CLOSE_SECONDS = 10.0
REAP_SECONDS = 1.0  # how long to wait for a dying process's exit code
Message = tuple[Any, ...]
GONE = (EOFError, OSError)  # a closed or broken pipe: BrokenPipeError, ConnectionResetError, …


ENDED = "the engine process ended unexpectedly"  # how every engine death is reported


class EngineProcessError(Exception):
    """An exception raised in the engine process (or the process ending), carried across."""

    remote_traceback = ""


_CARRIED: dict[str, type[EngineProcessError]] = {}


def carried_error(name: str, message: str, user: bool, remote_traceback: str) -> Exception:
    """The exception to raise in the window's process for an error of the engine process."""
    if user:
        return SpecdecError(message)
    kind = _CARRIED.get(name)
    if kind is None:  # named like the original, so the dialog reads "ValueError: …"
        kind = _CARRIED[name] = type(name, (EngineProcessError,), {})
    error = kind(message)
    error.remote_traceback = remote_traceback
    return error


# -- the engine process ------------------------------------------------------------------------
class _ChildStop:
    """Stop the current work: the window asked, or the window's process is gone."""

    def __init__(self, flag: SharedFlag) -> None:
        self.flag = flag
        self.parent = multiprocessing.parent_process()

    def is_set(self) -> bool:
        return self.flag.is_set() or (self.parent is not None and not self.parent.is_alive())


class _Host:
    """The child's side: one `SpecdecEngine`, one request at a time."""

    def __init__(self, engine: SpecdecEngine, conn: Connection, flag: SharedFlag) -> None:
        self.engine = engine
        self.conn = conn
        self.stop = _ChildStop(flag)
        self.commands: dict[str, Callable[..., Any]] = {
            "registries": engine.registries,
            "load_target": self.load_target,
            "run": self.run,
            "forget": engine.forget,
            "set_adapt": engine.set_adapt,
            "adapt": lambda budget: engine.adapt(budget, self.progress),
            "reset_adaptation": engine.reset_adaptation,
            "save_adapted": engine.save_adapted,
            "sweep": self.sweep,
            "tune": self.tune,
        }

    def send(self, *message: Any) -> None:
        self.conn.send(message)

    def progress(self, message: str, fraction: float) -> None:
        self.send("progress", message, fraction)

    def point(self, progress: object) -> None:
        self.send("point", progress)

    def handle(self, command: str, args: tuple) -> None:
        try:
            result = self.commands[command](*args)
        except (BrokenPipeError, EOFError):
            raise  # the window's process is gone: nothing to report to
        except SpecdecError as error:
            self.send("error", type(error).__name__, str(error), True, "")
        except Exception as error:  # a bug or a library failure: the window shows it
            self.send("error", type(error).__name__, str(error), False, traceback.format_exc())
        else:
            self.send("result", result)

    def load_target(
        self, spec: str, device: str, dtype: str, settings: LoadSettings | None = None
    ) -> tuple[TargetInfo, list[str]]:
        info = self.engine.load_target(spec, device, dtype, self.progress, self.stop, settings)
        with self.engine.exclusive() as target:  # every id the model can emit
            size = max(len(target.tokenizer), target.vocab_size)
        return info, [self.engine.token_text(token_id) for token_id in range(size)]

    def run(self, request: RunRequest) -> None:
        for event in self.engine.events(request, self.stop, self.progress):
            self.send("event", event)

    def sweep(self, method, grid, base, prompts, specs) -> SweepResult:
        backend = EngineBackend(self.engine)
        return backend.sweep(method, grid, base, prompts, specs, self.point, self.stop)

    def tune(self, method, config, specs) -> TuneResult:
        return EngineBackend(self.engine).tune(method, config, specs, self.point, self.stop)


def serve(conn: Connection, flag: SharedFlag, make_engine: Callable[[], SpecdecEngine]) -> None:
    """The engine process's main loop: requests until `close` or the window's process ends.
    Ctrl+C in a terminal reaches the whole process group: the window decides, not this."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    host = _Host(make_engine(), conn, flag)
    with contextlib.suppress(BrokenPipeError, EOFError, KeyboardInterrupt):
        while True:
            command, args = conn.recv()
            if command == "close":
                break
            host.handle(command, args)
    conn.close()


# -- the window's side -------------------------------------------------------------------------
class ProcessEngine:
    """The `Engine` protocol over a child process that holds a `SpecdecEngine`.

    `make_engine` builds the child's engine (a picklable callable: a class or a module-level
    function). Every method may be called from any thread; requests go one at a time.
    """

    def __init__(self, make_engine: Callable[[], SpecdecEngine] = SpecdecEngine) -> None:
        self._make_engine = make_engine
        self._context = multiprocessing.get_context("spawn")
        self._lock = threading.Lock()  # one request on the Pipe at a time
        self.process: multiprocessing.process.BaseProcess | None = None
        self._conn: Connection | None = None
        self._stop: SharedFlag | None = None
        self._texts: list[str] = []  # token id -> label, from the last load

    # -- the process ---------------------------------------------------------------------------
    def _started(self) -> Connection:
        """The live process's end of the Pipe, a new process if none was started (or it was
        closed); `EngineProcessError` if the one started has ended since."""
        if self._conn is not None and self.process is not None:
            if not self.process.is_alive():
                raise self._ended()
            return self._conn
        self._discard()
        ours, theirs = self._context.Pipe(duplex=True)
        self._stop = self._context.Event()
        process = self._context.Process(
            target=serve,
            args=(theirs, self._stop, self._make_engine),
            name="specdec-engine",
            daemon=True,  # ends with the window's process, whatever happens to it
        )
        process.start()
        theirs.close()  # the child holds the only other end: its exit reads as EOF here
        self.process, self._conn = process, ours
        return ours

    def _discard(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self.process, self._conn, self._texts = None, None, []

    def _ended(self) -> EngineProcessError:
        """The process ended without `close`: forget it (the next request starts a new one)
        and say so, with its exit code when it is known."""
        process = self.process
        code = None
        if process is not None:
            process.join(REAP_SECONDS)  # reaped, so that its exit code is known
            code = process.exitcode
        self._discard()
        return EngineProcessError(
            f"{ENDED} (exit code {code}); press Restart engine (or Load in the Models panel) to "
            "start it again"
        )

    def _send(self, conn: Connection, message: Message) -> None:
        try:
            conn.send(message)
        except GONE:
            raise self._ended() from None

    def close(self) -> None:
        """End the engine process (the window calls it when it closes); idempotent."""
        process = self.process
        if process is None:
            return
        held = self._lock.acquire(timeout=CLOSE_SECONDS)  # a request in flight: end it anyway
        try:
            if held and process.is_alive() and self._conn is not None:
                with contextlib.suppress(OSError):
                    self._conn.send(("close", ()))
                process.join(CLOSE_SECONDS)
            if process.is_alive():
                process.terminate()
                process.join(CLOSE_SECONDS)
            self._discard()
        finally:
            if held:
                self._lock.release()

    # -- one request ---------------------------------------------------------------------------
    def _request(self, command: str, args: tuple, stop: StopFlag | None = None) -> Generator:
        """Send one request; yield its progress / event / point messages and return its
        result, or raise its error. Call with the lock held. Closed early, it stops the
        child's work and reads the request to its end."""
        conn = self._started()
        assert self._stop is not None
        self._stop.clear()
        self._send(conn, (command, args))
        ended = False
        try:
            while True:
                kind, *payload = self._receive(conn, stop)
                if kind == "result":
                    ended = True
                    return payload[0]
                if kind == "error":
                    ended = True
                    error = carried_error(*payload)
                    if payload[3]:
                        log.error("%s failed in the engine process:\n%s", command, payload[3])
                    raise error
                yield kind, payload
        finally:
            if not ended:
                self._stop.set()
                with contextlib.suppress(EngineProcessError):
                    while self._receive(conn, None)[0] not in ("result", "error"):
                        pass

    def _receive(self, conn: Connection, stop: StopFlag | None) -> Message:
        try:
            while not conn.poll(POLL_SECONDS):
                if stop is not None and stop.is_set():
                    self._stop.set()
            if stop is not None and stop.is_set():
                self._stop.set()
            return conn.recv()
        except GONE:
            raise self._ended() from None

    def _call(
        self,
        command: str,
        *args: Any,
        progress: Progress | None = None,
        on_point: OnPoint | None = None,
        stop: StopFlag | None = None,
    ) -> Any:
        """One request to its result, passing its progress and sweep points on."""
        with self._lock:
            messages = self._request(command, args, stop)
            while True:
                try:
                    kind, payload = next(messages)
                except StopIteration as end:
                    return end.value
                if kind == "progress" and progress is not None:
                    progress(*payload)
                elif kind == "point" and on_point is not None:
                    on_point(payload[0])

    # -- the Engine protocol -------------------------------------------------------------------
    def registries(self) -> Registries:
        return self._call("registries")

    def load_target(
        self,
        spec: str,
        device: str,
        dtype: str,
        progress: Progress,
        stop: StopFlag | None = None,
        settings: LoadSettings | None = None,
    ) -> TargetInfo:
        """Loads in the engine process; Cancel (`stop`) reaches it between loading stages."""
        info, texts = self._call(
            "load_target", spec, device, dtype, settings, progress=progress, stop=stop
        )
        self._texts = texts
        return info

    def events(self, request: RunRequest, stop: StopFlag, progress: Progress) -> Iterator[Event]:
        with self._lock:
            messages = self._request("run", (request,), stop)
            try:
                stopping = False
                for kind, payload in messages:
                    if kind == "progress":
                        progress(*payload)
                        continue
                    event = payload[0]
                    if stopping and isinstance(event, Step):
                        continue  # the consumer saw Stop: only the Finished still matters
                    yield event
                    stopping = stop.is_set()
            finally:
                messages.close()

    def token_text(self, token_id: int) -> str:
        texts = self._texts
        return texts[token_id] if 0 <= token_id < len(texts) else str(token_id)

    def forget(self, conversation: str) -> None:
        self._call("forget", conversation)

    def set_adapt(self, on: bool) -> None:
        self._call("set_adapt", on)

    def adapt(self, budget_seconds: float, progress: Progress) -> str:
        """The head adapts in the engine process, where the runs were kept."""
        return self._call("adapt", budget_seconds, progress=progress)

    def reset_adaptation(self) -> str:
        return self._call("reset_adaptation")

    def save_adapted(self, directory: str) -> str:
        return self._call("save_adapted", directory)

    def exclusive(self) -> contextlib.AbstractContextManager:
        raise SpecdecError(
            "the models live in the engine process; measure through ProcessEngine.sweep_backend()"
        )

    def extra(self, method: str, specs: dict[str, str], progress: Progress) -> None:
        raise SpecdecError("the drafts and heads live in the engine process, not in the window")

    def sweep_backend(self) -> ProcessBackend:
        """Sweeps and Tune measure in the engine process (`backend_for` picks this)."""
        return ProcessBackend(self)


class ProcessBackend:
    """The `SweepBackend` protocol: the child runs `EngineBackend` over its own engine and
    sends every measured point back as it comes."""

    def __init__(self, engine: ProcessEngine) -> None:
        self.engine = engine

    def sweep(self, method, grid, base, prompts, specs, on_point, stop) -> SweepResult:
        args = (method, grid, base, list(prompts), specs)
        return self.engine._call("sweep", *args, on_point=on_point, stop=stop)

    def tune(self, method, config, specs, on_point, stop) -> TuneResult:
        """Stop (`stop`) reaches the child's tuning, which ends after the current point."""
        return self.engine._call("tune", method, config, specs, on_point=on_point, stop=stop)
