"""The engine in its own process, so that the window does not slow down what it measures.

In one process the GUI thread (painting, pyqtgraph) and the engine's worker thread share one
interpreter lock, and a run's tokens/s drops by 10-25 %. `ProcessEngine` fulfils the `Engine`
protocol (app/engine_api.py) by talking to a child process that holds a `SpecdecEngine` and
its models (loaded once per process): sweeps and Tune measure there too.

The child is started with "spawn" (a fork of a process with Qt or torch threads is unsafe)
at the first call, and talks over one duplex `multiprocessing` Pipe, one request at a time:

- window -> engine: `(command, arguments)`: a method of the protocol by its own name
  (`engine_api.COMMANDS`: registries, load_target, events, distance, forget, sweep, tune,
  set_adapt, adapt, reset_adaptation, save_adapted; `close` ends the process) and its value
  arguments by name, or `LABELS` (the label of every token id). The child calls its engine's
  method of that name; the `progress`, `on_point` and `stop` parameters become messages
  (below). Arguments and results are the frozen dataclasses of app/engine_api.py,
  specdec_core.decoding.events, .run_distance and .sweep_records (picklable).
- engine -> window, for each request: any number of `("progress", message, fraction)`,
  `("event", Started | Step | Finished)` (what a streaming method yields) and
  `("point", SweepProgress)`, then exactly one of `("result", value)` or
  `("error", type name, message, is a user error, traceback)`.
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
child. `load_target` brings back the text of every token id after the `TargetInfo`, decoded
by the child's own `token_text`, and labels are looked up in that table.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import multiprocessing
import signal
import threading
import traceback
from collections.abc import Callable, Generator, Iterator
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from app.engine import SpecdecEngine
from app.engine_api import (
    COMMANDS,
    ENDED,
    Engine,
    OnPoint,
    Progress,
    RunRequest,
    StopFlag,
    TargetInfo,
    TargetRequest,
)
from specdec_core.decoding.events import Event, Step
from specdec_core.errors import SpecdecError

if TYPE_CHECKING:
    from multiprocessing.synchronize import Event as SharedFlag

log = logging.getLogger(__name__)

POLL_SECONDS = 0.02  # how often a waiting request looks at the window's stop flag
CLOSE_SECONDS = 10.0
REAP_SECONDS = 1.0  # how long to wait for a dying process's exit code
Message = tuple[Any, ...]
CHANNELS = ("progress", "on_point", "stop")  # parameters answered by messages, not sent
LABELS = "token_texts"  # the one request that is not a protocol method
GONE = (EOFError, OSError)  # a closed or broken pipe: BrokenPipeError, ConnectionResetError, …


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
        self.channels: dict[str, Any] = {
            "progress": self.progress,
            "on_point": self.point,
            "stop": _ChildStop(flag),
        }

    def send(self, *message: Any) -> None:
        self.conn.send(message)

    def progress(self, message: str, fraction: float) -> None:
        self.send("progress", message, fraction)

    def point(self, progress: object) -> None:
        self.send("point", progress)

    def handle(self, command: str, arguments: dict[str, Any]) -> None:
        try:
            result = self.answer(command, arguments)
        except (BrokenPipeError, EOFError):
            raise  # the window's process is gone: nothing to report to
        except SpecdecError as error:
            self.send("error", type(error).__name__, str(error), True, "")
        except Exception as error:  # a bug or a library failure: the window shows it
            self.send("error", type(error).__name__, str(error), False, traceback.format_exc())
        else:
            self.send("result", result)

    def answer(self, command: str, arguments: dict[str, Any]) -> Any:
        """Call the engine's method `command`, its channels connected to the Pipe; what a
        streaming method yields goes back as events."""
        if command == LABELS:
            return self.engine.token_texts()
        signature = COMMANDS[command]
        channels = {name: self.channels[name] for name in CHANNELS if name in signature.parameters}
        result = getattr(self.engine, command)(**arguments, **channels)
        if inspect.isgenerator(result):
            for event in result:
                self.send("event", event)
            return None
        return result


def serve(conn: Connection, flag: SharedFlag, make_engine: Callable[[], SpecdecEngine]) -> None:
    """The engine process's main loop: requests until `close` or the window's process ends.
    Ctrl+C in a terminal reaches the whole process group: the window decides, not this."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    host = _Host(make_engine(), conn, flag)
    with contextlib.suppress(BrokenPipeError, EOFError, KeyboardInterrupt):
        while True:
            command, arguments = conn.recv()
            if command == "close":
                break
            host.handle(command, arguments)
    conn.close()


# -- the window's side -------------------------------------------------------------------------
class ProcessEngine:
    """The `Engine` protocol over a child process that holds a `SpecdecEngine`.

    `make_engine` builds the child's engine (a picklable callable: a class or a module-level
    function). Every method may be called from any thread; requests go one at a time. The
    protocol's methods not defined here send their own name (`_forwarding`, below the class).
    """

    def __init__(self, make_engine: Callable[[], SpecdecEngine] = SpecdecEngine) -> None:
        self._make_engine = make_engine
        self._context = multiprocessing.get_context("spawn")
        self._lock = threading.RLock()  # one request on the Pipe at a time
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
        try:
            process.start()
        except OSError as error:  # it died while reading what to run, or could not be made
            ours.close()
            theirs.close()
            raise EngineProcessError(
                f"{ENDED} while starting ({error}); press Restart engine to try again"
            ) from None
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
                    self._conn.send(("close", {}))
                process.join(CLOSE_SECONDS)
            if process.is_alive():
                process.terminate()
                process.join(CLOSE_SECONDS)
            self._discard()
        finally:
            if held:
                self._lock.release()

    # -- one request ---------------------------------------------------------------------------
    def _request(
        self, command: str, arguments: dict[str, Any], stop: StopFlag | None = None
    ) -> Generator:
        """Send one request; yield its progress / event / point messages and return its
        result, or raise its error. Call with the lock held. Closed early, it stops the
        child's work and reads the request to its end."""
        conn = self._started()
        assert self._stop is not None
        self._stop.clear()
        self._send(conn, (command, arguments))
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
        arguments: dict[str, Any],
        progress: Progress | None = None,
        on_point: OnPoint | None = None,
        stop: StopFlag | None = None,
    ) -> Any:
        """One request to its result, passing its progress and sweep points on."""
        with self._lock:
            messages = self._request(command, arguments, stop)
            while True:
                try:
                    kind, payload = next(messages)
                except StopIteration as end:
                    return end.value
                if kind == "progress" and progress is not None:
                    progress(*payload)
                elif kind == "point" and on_point is not None:
                    on_point(payload[0])

    def _forward(self, command: str, *args: Any, **kwargs: Any) -> Any:
        """Call the protocol's method `command` in the engine process: its arguments are bound
        by the protocol's signature, the channels stay here and hear the child's messages."""
        arguments = dict(COMMANDS[command].bind(*args, **kwargs).arguments)
        channels = {name: arguments.pop(name, None) for name in CHANNELS}
        return self._call(command, arguments, **channels)

    # -- the Engine methods that do more than forward ------------------------------------------
    def load_target(
        self, target: TargetRequest, progress: Progress, stop: StopFlag | None = None
    ) -> TargetInfo:
        """Loads in the engine process (Cancel, `stop`, reaches it between loading stages),
        then brings back the label of every token id."""
        with self._lock:
            info = self._forward("load_target", target, progress, stop)
            self._texts = self._call(LABELS, {})
        return info

    def events(self, request: RunRequest, stop: StopFlag, progress: Progress) -> Iterator[Event]:
        with self._lock:
            messages = self._request("events", {"request": request}, stop)
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


def _forwarding(command: str) -> Callable[..., Any]:
    """A method that forwards the protocol's `command`, with its signature and docstring."""

    @functools.wraps(getattr(Engine, command))
    def method(self: ProcessEngine, *args: Any, **kwargs: Any) -> Any:
        return self._forward(command, *args, **kwargs)

    return method


for _command in COMMANDS:
    if _command not in vars(ProcessEngine):  # the others forward as they are
        setattr(ProcessEngine, _command, _forwarding(_command))
