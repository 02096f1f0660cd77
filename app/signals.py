"""Ctrl+C (SIGINT) and SIGTERM end `specdec-gui` within seconds, whatever the window is doing.

Python runs a signal handler only when the interpreter gets control, and the GUI thread waits
in Qt's event loop. So the handler's C part writes the signal's number to a socket
(`signal.set_wakeup_fd`) and a `QSocketNotifier` on the other end wakes the event loop, which
then, in order:

1. saves the settings (before anything that could wait);
2. ends the engine process at once when it is starting or loading a model: a load stops only
   between its stages, and what it loads would be dropped anyway;
3. closes every dialog (an error box, Export to server…, a file dialog or About in its own
   event loop);
4. closes the window as the user would (settings saved, runs and sweeps stopped, a training
   child stopped, the engine process ended);
5. ends the event loop, whatever opened meanwhile (an error box raised by work that ended
   while the window closed would otherwise keep the process alive with no window): the
   process exits with 128 + the signal's number.

A watchdog thread bounds what the window waits for while it closes: after `GRACE_SECONDS` the
engine process is ended (a run or sweep waiting on it then ends at once), after
`LIMIT_SECONDS` the process exits as it stands (the settings were saved in step 1; an engine
loading in the window's own process, `--in-process`, cannot be interrupted otherwise).
A second signal while the event loop runs ends it at once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
import time
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, QSocketNotifier
from PySide6.QtWidgets import QApplication, QDialog, QWidget

from app.process_engine import ProcessEngine

if TYPE_CHECKING:
    from app.main_window import MainWindow

log = logging.getLogger(__name__)

SIGNALS = (signal.SIGINT, signal.SIGTERM)
GRACE_SECONDS = 2.0  # then the engine process is ended, so nothing waits for it
LIMIT_SECONDS = 8.0  # then the process exits as it stands


def end_engine_process(engine: object, kill: bool = False) -> None:
    """End the engine's child process now (SIGTERM, or SIGKILL when `kill`): a request that
    waits for it then fails at once. Nothing for an engine in the window's own process."""
    if not isinstance(engine, ProcessEngine):
        return
    process = engine.process  # read once: the GUI thread may forget it meanwhile
    if process is None or process.pid is None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, signal.SIGKILL if kill else signal.SIGTERM)


def close_dialogs(keep: QWidget) -> None:
    """Close every visible top-level widget but `keep`; a dialog in its own event loop
    (`exec`) is rejected, which ends that loop."""
    for _ in range(50):  # a dialog's closing may open another, for a while
        open_ = [w for w in QApplication.topLevelWidgets() if w is not keep and w.isVisible()]
        modal = QApplication.activeModalWidget()
        if modal is not None and modal is not keep and modal not in open_:
            open_.append(modal)
        if not open_:
            return
        for widget in open_:
            if isinstance(widget, QDialog):
                widget.done(QDialog.DialogCode.Rejected)
            else:
                widget.close()
            if widget.isVisible():  # a box without an escape button ignores close
                widget.hide()


class SignalExit(QObject):
    """Installs the handlers for `SIGNALS` (call it from the main thread) and closes `window`
    on the first signal."""

    def __init__(self, app: QApplication, window: MainWindow) -> None:
        super().__init__(window)
        self.app, self.window, self.engine = app, window, window.engine
        self.number: int | None = None  # the first signal received
        self._read, self._write = socket.socketpair()
        for end in (self._read, self._write):
            end.setblocking(False)
        self._previous_fd = signal.set_wakeup_fd(self._write.fileno(), warn_on_full_buffer=False)
        for number in SIGNALS:
            # the C handler writes the number to the socket; the Python one has nothing to do
            signal.signal(number, lambda *_: None)
        self.notifier = QSocketNotifier(self._read.fileno(), QSocketNotifier.Type.Read, self)
        self.notifier.activated.connect(self._on_wakeup)

    @property
    def code(self) -> int:
        """The exit status for the signal received: 128 + its number."""
        return 128 + (self.number or 0)

    def _on_wakeup(self) -> None:
        numbers = b""
        with contextlib.suppress(BlockingIOError, InterruptedError):
            numbers = self._read.recv(64)
        received = [n for n in numbers if n in SIGNALS]
        if not received:
            return
        if self.number is not None:  # a second signal: do not wait any more
            self.app.exit(self.code)
            return
        self.shut_down(received[0])

    def shut_down(self, number: int) -> None:
        """Close the window and end the event loop, bounded in time (see the module)."""
        self.number = number
        log.warning("%s received: closing the window", signal.Signals(number).name)
        threading.Thread(target=self._watch, name="signal-exit", daemon=True).start()
        self.window.settings.save()  # the window's own closing saves them again
        if self.window.controller.task_running:  # the engine's start or a model load
            end_engine_process(self.engine)
        close_dialogs(keep=self.window)
        self.window.close()
        close_dialogs(keep=self.window)  # what the closing raised (an error box)
        self.app.exit(self.code)

    def _watch(self) -> None:
        """Bound the closing: the engine process ends after GRACE_SECONDS, this process
        after LIMIT_SECONDS (a daemon thread: it dies with a process that exited in time)."""
        started = time.monotonic()
        time.sleep(GRACE_SECONDS)
        end_engine_process(self.engine)
        time.sleep(max(0.0, LIMIT_SECONDS - (time.monotonic() - started)))
        end_engine_process(self.engine, kill=True)
        os._exit(self.code)
