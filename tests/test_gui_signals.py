"""SIGTERM and Ctrl+C (SIGINT) end `specdec-gui` and its engine process within seconds in every
state, and the settings are saved: while the engine loads a model (a load that never looks at
Stop), idle, during a run, with a dialog open in its own event loop, and after the engine
process died (its error box open).

Each test starts `app.main.main()` in a fresh interpreter, its engine process on a fake engine
(`SlowLoadEngine`, below, built there by `ProcessEngine`), waits for the state, changes the
prompt (so only the closing can have saved it), sends the signal and times the exit. SIGTERM
goes to the window's process (`kill PID`), SIGINT to its process group, as Ctrl+C in a
terminal (the engine process ignores it); and SIGTERM to the group while loading (as a
service manager sends it): the engine process dies with it, and the error box its death
raises must not keep the closed window's process alive."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.gui_fake import FakeEngine

ROOT = Path(__file__).resolve().parents[1]
READY_SECONDS = 120.0  # start-up on a busy machine: Qt, the window, the engine process
EXIT_SECONDS = 6.0  # from the signal to the process's exit
LOAD_SECONDS = 600.0  # the slow load: far longer than any test


class SlowLoadEngine(FakeEngine):
    """The fake engine for the engine process: a model load that takes `SLOW_LOAD` seconds
    (an environment variable) and never looks at Stop, and runs that last."""

    def __init__(self) -> None:
        super().__init__(steps=100_000, delay=0.02)

    def load_target(self, target, progress, stop=None):
        time.sleep(float(os.environ.get("SLOW_LOAD", "0")))
        return super().load_target(target, progress, stop)

    def token_texts(self) -> list[str]:
        return [self.token_text(i) for i in range(200)]


SCRIPT = """
import os, signal, sys
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
app = QApplication([sys.argv[0]])
import app.main as main
from app.main_window import MainWindow
from app.menus import show_about
from app.process_engine import ProcessEngine
from app.session import Activity
from tests.test_gui_signals import SlowLoadEngine
state, mark = sys.argv[1], sys.argv[2]
if state == "in-process-loading":  # the engine in the window's process: nothing ends its load
    main.make_engine = lambda in_process=False: SlowLoadEngine()
else:
    main.make_engine = lambda in_process=False: ProcessEngine(SlowLoadEngine)

def window():
    return next(w for w in app.topLevelWidgets() if isinstance(w, MainWindow))

def when(condition, then):
    QTimer.singleShot(20, lambda: then() if condition() else when(condition, then))

def ready():
    window().prompt.set_text(mark)  # only the closing can save this
    engine = window().engine
    process = engine.process if isinstance(engine, ProcessEngine) else None
    print("READY", process.pid if process is not None else 0, flush=True)

def start():
    w = window()
    if state in ("loading", "in-process-loading"):
        when(lambda: w.session.activity is Activity.LOADING, ready)
    elif state == "idle":
        when(w.ready, ready)
    elif state == "running":
        def generate():
            w.prompt.set_text("hello")
            w.generate()
            when(lambda: w.controller.running and w.output.view.toPlainText(), ready)
        when(w.ready, generate)
    elif state == "dialog":
        def dialogs():
            w.actions.export_server.trigger()
            QTimer.singleShot(200, ready)
            show_about(w)  # modal, in its own event loop until closed
        when(w.ready, dialogs)
    elif state == "engine-dead":
        def kill():
            os.kill(w.engine.process.pid, signal.SIGKILL)
            w.engine.process.join(10)
            w.prompt.set_text("hello")
            w.generate()  # meets the dead engine: its error box opens
            when(lambda: w.error_box is not None and w.error_box.isVisible(), ready)
        when(w.ready, kill)

QTimer.singleShot(0, start)
sys.exit(main.main([]))
"""


def lines_of(stream) -> queue.Queue:
    lines: queue.Queue = queue.Queue()

    def read() -> None:
        for line in stream:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    return lines


def wait_for_ready(lines: queue.Queue, process: subprocess.Popen, log: Path) -> int:
    """The engine process's id, once the script says the state is reached."""
    deadline = time.monotonic() + READY_SECONDS
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.2)
        except queue.Empty:
            assert process.poll() is None, f"ended early:\n{log.read_text()[-3000:]}"
            continue
        if line.startswith("READY"):
            return int(line.split()[1])
    raise AssertionError(f"the state was not reached:\n{log.read_text()[-3000:]}")


def gone(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


STATES = ["loading", "idle", "running", "dialog", "engine-dead"]
CASES = [
    *((state, signal.SIGTERM, False) for state in STATES),
    *((state, signal.SIGINT, True) for state in STATES),
    ("loading", signal.SIGTERM, True),
    ("in-process-loading", signal.SIGTERM, False),
]


@pytest.mark.parametrize(
    ("state", "number", "group"),
    CASES,
    ids=[f"{s}-{signal.Signals(n).name}{'-group' if g else ''}" for s, n, g in CASES],
)
def test_a_signal_ends_the_window_and_its_engine_within_seconds(state, number, group, tmp_path):
    from app.signals import LIMIT_SECONDS

    mark = f"closed while {state}"
    env = {
        **os.environ,
        "QT_QPA_PLATFORM": "offscreen",
        "HF_HUB_OFFLINE": "1",
        "SPECDEC_CONFIG_DIR": str(tmp_path / "config"),
        "SPECDEC_DATA_DIR": str(tmp_path / "data"),
        "SPECDEC_LOG_DIR": str(tmp_path / "log"),
        "SLOW_LOAD": str(LOAD_SECONDS if state.endswith("loading") else 0),
    }
    log = tmp_path / "stderr.txt"
    with log.open("w") as errors:
        process = subprocess.Popen(
            [sys.executable, "-c", SCRIPT, state, mark],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=errors, text=True,
            start_new_session=True,  # its own process group, with its engine process
        )  # fmt: skip
    try:
        engine_pid = wait_for_ready(lines_of(process.stdout), process, log)
        sent = time.monotonic()
        if group:
            os.killpg(process.pid, number)
        else:
            process.send_signal(number)
        code = process.wait(timeout=30)
        seconds = time.monotonic() - sent
    finally:  # whatever happened, nothing of this test's process group stays behind
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    to = "its process group" if group else "the window's process"
    print(f"{signal.Signals(number).name} to {to} while {state}: exit {code} after {seconds:.2f} s")
    assert code == 128 + number, log.read_text()[-3000:]
    # a load in the window's process ends only with the process, at the watchdog's limit
    bound = LIMIT_SECONDS + EXIT_SECONDS if state == "in-process-loading" else EXIT_SECONDS
    assert seconds < bound, log.read_text()[-3000:]
    assert engine_pid == 0 or gone(engine_pid, 5.0), "the engine process outlived the window"
    saved = json.loads((tmp_path / "config" / "settings.json").read_text())
    assert saved["prompt"] == mark
