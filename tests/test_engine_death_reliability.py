"""An engine process killed (SIGKILL) at a random moment of a load, a run, a sweep or a chat
turn is only ever an `EngineProcessError` for whoever called the engine, and in the window
one line that offers Restart engine; nothing the user typed or chose is lost, and the first
command after Restart engine works.

Each activity is killed `SPECDEC_KILL_ROUNDS` times (4 by default, about half a minute in
all on two cores; `SPECDEC_KILL_ROUNDS=50` for the full run) at a moment drawn uniformly over
its measured duration and a little past it, so some kills land while it is idle afterwards:
the death then surfaces at the next command, the same way. The engine in the engine process
is `PacedEngine` (tests/paced_engine.py): no torch, so a fresh process starts in a fraction
of a second, and each activity lasts long enough for a kill to land inside it.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from PySide6.QtWidgets import QMessageBox

from app.engine_api import ENDED, RunRequest, SweepRequest, TargetRequest
from app.main_window import MainWindow
from app.process_engine import EngineProcessError, ProcessEngine
from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.events import Finished
from specdec_core.measurement.sweep_records import Grid
from tests.paced_engine import PacedEngine

ROUNDS = int(os.environ.get("SPECDEC_KILL_ROUNDS", "4"))
ACTIVITIES = ("load", "run", "sweep", "chat")
PAST_THE_END = 1.25  # kills are drawn over this share of an activity's measured duration
SEED = int(os.environ.get("SPECDEC_KILL_SEED", "0"))


@dataclass
class Tally:
    """Where the kills of one activity landed (printed with -s)."""

    during: int = 0  # the activity itself raised (or showed) the engine's death
    after: int = 0  # the activity had ended: the next command met the death
    began: float = field(default_factory=time.monotonic)

    def report(self, what: str) -> None:
        seconds = time.monotonic() - self.began
        print(f"{what}: {ROUNDS} kills, {self.during} during, {self.after} after, {seconds:.1f} s")


def kill_later(engine: ProcessEngine, delay: float) -> threading.Timer:
    """SIGKILL the engine's process `delay` seconds from now (whichever process it is then)."""

    def kill() -> None:
        process = engine.process
        if process is not None and process.pid is not None:
            with contextlib.suppress(ProcessLookupError):  # it had ended already
                os.kill(process.pid, signal.SIGKILL)

    timer = threading.Timer(delay, kill)
    timer.start()
    return timer


def assert_one_engine_death(error: BaseException) -> None:
    """The error is the engine's death, said in one line."""
    assert type(error) is EngineProcessError, f"{type(error).__name__}: {error}"
    line = str(error)
    assert ENDED in line and "\n" not in line and "Restart engine" in line


# -- whoever calls the engine: only EngineProcessError -----------------------------------------
RUN = RunRequest("classic", "Tell me a story.", DecodeConfig(max_new_tokens=20, k=4))
CHAT = RunRequest("eagle", "hello", DecodeConfig(max_new_tokens=20), conversation="chat")
SWEEP = SweepRequest("classic", Grid({"temperature": [0.0], "k": [1, 2, 3, 4, 6, 8]}),
                     DecodeConfig(max_new_tokens=20), ("a prompt",))  # fmt: skip


def nothing(*_) -> None:
    return None


def activity_call(engine: ProcessEngine, activity: str) -> Callable[[], object]:
    stop = threading.Event()
    if activity == "load":
        return lambda: engine.load_target(TargetRequest("paced", "cpu", "float32"), nothing, stop)
    if activity == "sweep":
        return lambda: engine.sweep(SWEEP, nothing, stop)
    request = RUN if activity == "run" else CHAT
    return lambda: [event for event in engine.events(request, stop, nothing)]


def restarted(engine: ProcessEngine) -> None:
    """What Restart engine asks: the registries, then the target; then a run must finish."""
    engine.registries()
    engine.load_target(TargetRequest("paced", "cpu", "float32"), nothing)
    events = list(engine.events(RUN, threading.Event(), nothing))
    assert isinstance(events[-1], Finished) and events[-1].summary.new_tokens > 0


@pytest.mark.slow
@pytest.mark.parametrize("activity", ACTIVITIES)
def test_a_kill_at_any_moment_reaches_the_caller_only_as_an_engine_process_error(activity):
    engine = ProcessEngine(PacedEngine)
    chooser = random.Random(f"{SEED}-{activity}")
    tally = Tally()
    try:
        restarted(engine)
        timed = time.monotonic()
        activity_call(engine, activity)()  # its duration, undisturbed
        duration = time.monotonic() - timed
        for _ in range(ROUNDS):
            timer = kill_later(engine, chooser.uniform(0, duration * PAST_THE_END))
            try:
                activity_call(engine, activity)()
            except Exception as error:  # noqa: BLE001  (what reaches the caller is the test)
                assert_one_engine_death(error)
                tally.during += 1
                timer.join()
            else:
                timer.join()
                process = engine.process
                if process is not None:
                    process.join(5)  # the kill has landed: the next command meets it
                with pytest.raises(Exception) as caught:
                    engine.registries()
                assert_one_engine_death(caught.value)
                tally.after += 1
            restarted(engine)
    finally:
        engine.close()
    tally.report(activity)


# -- the window: one line, Restart engine, nothing lost ----------------------------------------
PROMPT = "Tell me a story about a lighthouse."


@pytest.fixture
def window(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("SPECDEC_DATA_DIR", str(tmp_path / "data"))
    settings = tmp_path / "settings.json"
    values = {"target": "paced", "device": "cpu", "dtype": "float32", "method": "classic"}
    settings.write_text(json.dumps({**values, "prompt": PROMPT, "compare_methods": ["eagle"]}))
    engine = ProcessEngine(PacedEngine)
    window = MainWindow(engine=engine, settings_file=settings)
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(window.ready, timeout=30_000)
    yield window
    window.close()
    assert engine.process is None


def settled(window: MainWindow) -> bool:
    """Nothing runs or waits to run: the last worker's signals have all arrived."""
    return not window.session.busy and window.jobs.live_threads() == 0


def start(window: MainWindow, activity: str) -> None:
    if activity == "load":
        window.load_target()
    elif activity == "run":
        window.generate()
    elif activity == "sweep":
        window.sweep.view.k_values.setText("1,2,3,4,6,8")
        window.sweep.view.temperatures.setText("0")
        assert window.sweep.run_sweep()
    else:
        window.show_chat()
        window.prompt.set_text("hello there")
        window.generate()
    assert window.session.busy


def typed(window: MainWindow) -> dict:
    """What the user typed and chose (a chat turn's message is sent: it is not here)."""
    return {
        "prompt": window.prompt.text(),
        "decoding": window.decoding.values(),
        "params": {name: spin.value() for name, spin in window.decoding.params.items()},
        "models": window.models.values(),
        "compare": window.compare.chosen(),
        "sweep": (window.sweep.view.k_values.text(), window.sweep.view.temperatures.text()),
    }


def restart_button(window: MainWindow):
    box = window.error_box
    assert box is not None
    buttons = [b for b in box.buttons() if b.text() == "Restart engine"]
    assert len(buttons) == 1, [b.text() for b in box.buttons()]
    return buttons[0]


@pytest.mark.slow
@pytest.mark.parametrize("activity", ACTIVITIES)
def test_a_kill_at_any_moment_is_one_line_in_the_window_and_restart_engine_brings_it_back(
    qtbot, window, activity
):
    chooser = random.Random(f"{SEED}-window-{activity}")
    tally = Tally()
    errors: list[str] = []
    session = window.session

    def heard(what: str) -> None:
        message = session.last_message
        if what == "message" and message is not None and message.error:
            errors.append(message.text)

    session.on_change(heard)
    window.decoding.select(window.decoding.policy, "threshold")  # a parameter typed by hand
    window.decoding.params["tau"].setValue(0.42)
    timed = time.monotonic()
    start(window, activity)  # its duration in the window, undisturbed
    qtbot.waitUntil(lambda: settled(window), timeout=10_000)
    duration = time.monotonic() - timed
    assert errors == []
    for _ in range(ROUNDS):
        if activity == "chat":
            window.chat.clear()
        errors.clear()
        timer = kill_later(window.engine, chooser.uniform(0, duration * PAST_THE_END))
        start(window, activity)
        before = typed(window)  # a chat turn's message has left the prompt box
        qtbot.waitUntil(lambda t=timer: settled(window) and not t.is_alive(), timeout=10_000)
        if errors:
            tally.during += 1
        else:  # the kill came after the end: the next command (Load) meets it
            if window.engine.process is not None:
                window.engine.process.join(5)
            window.load_target()
            qtbot.waitUntil(lambda: settled(window) and bool(errors), timeout=10_000)
            tally.after += 1
        assert len(errors) == 1, errors  # one message, and only the engine's death
        (line,) = errors
        assert line.startswith("EngineProcessError: ") and ENDED in line and "\n" not in line
        assert window.last_error == line and window.error_box.windowTitle() != "Cannot do that"
        assert not window.ready()  # nothing is loaded any more: nothing may start
        kept = typed(window)
        if activity == "chat" and kept["prompt"] != before["prompt"]:
            assert kept["prompt"] == "hello there"  # the unanswered message is back in the box
            assert {**kept, "prompt": before["prompt"]} == before
        else:
            assert kept == before
        restart_button(window).click()
        qtbot.waitUntil(window.ready, timeout=10_000)
        assert typed(window) == kept
        window.tabs.setCurrentWidget(window.output)
        window.prompt.set_text(PROMPT)  # a chat round may have left the box empty
        window.generate()
        qtbot.waitUntil(lambda: settled(window), timeout=10_000)
        assert session.last_results["run"].stop_reason == "max_tokens"
        assert len(errors) == 1  # the run after Restart engine met no error
        window.error_box.done(QMessageBox.StandardButton.Close)
    tally.report(f"window {activity}")
