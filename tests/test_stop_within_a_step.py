"""Stop ends every job of the window within one decode step, on a target whose every forward
takes seconds (tests/slow_engine.py): a run, a Compare, a chat turn, Tune and a sweep, through
the real engine and measurement; the Stop button is live for each; a Tune or a sweep keeps the
points it finished and marks the one Stop cut short. The seconds from Stop to idle are printed
(`pytest -s`) for docs/window.md."""

from __future__ import annotations

import json
import threading
import time

import pytest

from specdec_core.decoding.config import DecodeConfig
from specdec_core.measurement.measure import MeasurementStopped, run_one
from specdec_core.tuning.autotune import tune_on_device
from specdec_core.tuning.sweep import BenchMeasure, Grid, interrupted_point, run_sweep
from tests.gui_window import make_window_fixture  # noqa: F401 (a fixture)
from tests.slow_engine import (
    SETTINGS,
    Pace,
    SlowEngine,
    slow_target,
    train_tab,
    train_target_fixture,  # noqa: F401 (a fixture)
)
from tests.tiny import prompt

STEP = 1.5  # seconds per forward once slow: "a step takes seconds"
SLACK = 1.5  # what a busy machine may add between the step's end and idle
WITHIN = STEP + SLACK


def _stop_later(stop: threading.Event, pace: Pace, after: threading.Event) -> threading.Thread:
    """Once `after` is set: slow the target down, wait until a slow forward has begun, set
    `stop` and note when."""
    pressed: list[float] = []

    def press() -> None:
        after.wait(60)
        pace.slow(STEP)
        pace.begun.wait(60)
        time.sleep(STEP / 3)  # in the middle of the step
        pressed.append(time.monotonic())
        stop.set()

    thread = threading.Thread(target=press)
    thread.pressed = pressed  # type: ignore[attr-defined]
    thread.start()
    return thread


# -- the measurement (no window) -------------------------------------------------------------
def test_a_stopped_run_inside_a_measurement_gives_no_numbers():
    pace = Pace()
    target = slow_target(pace)
    stop = threading.Event()
    stop.set()
    with pytest.raises(MeasurementStopped):
        run_one("ngram", target, prompt(6), DecodeConfig(max_new_tokens=8), stop=stop)


def test_stop_reaches_inside_a_tune_point_which_is_dropped_and_named():
    pace = Pace()
    target = slow_target(pace)
    stop, first_point = threading.Event(), threading.Event()
    presser = _stop_later(stop, pace, first_point)
    config = DecodeConfig(max_new_tokens=24, k=4)
    result = tune_on_device(
        target, "ngram", config, {}, progress=lambda _: first_point.set(), stop=stop
    )
    ended = time.monotonic()
    presser.join()
    seconds = ended - presser.pressed[0]
    print(f"\nstop to idle, tune (engine): {seconds:.2f} s with {STEP} s steps")
    assert seconds < WITHIN
    assert result.stopped and result.k == 4  # the setting stays as it was
    assert [row.k for row in result.table] == [1]  # the point finished before Stop stays
    assert "Stop cut k=2 short" in result.reason


def test_stop_reaches_inside_a_sweep_point_of_a_measure_built_without_it():
    """As the engine builds it: `BenchMeasure` without a stop flag, `run_sweep` with one."""
    pace = Pace()
    target = slow_target(pace)
    measure = BenchMeasure(target, ["w1 w2 w3", "w4 w5"], {}, raw=True)
    stop, first_point = threading.Event(), threading.Event()
    presser = _stop_later(stop, pace, first_point)
    grid = Grid({"temperature": [0.0], "k": [1, 2, 3]})
    base = DecodeConfig(max_new_tokens=24)
    result = run_sweep(
        "ngram", grid, base, measure, progress=lambda _: first_point.set(), stop=stop
    )
    ended = time.monotonic()
    presser.join()
    seconds = ended - presser.pressed[0]
    print(f"\nstop to idle, sweep (engine): {seconds:.2f} s with {STEP} s steps")
    assert seconds < WITHIN
    assert [p.point for p in result.points] == [{"temperature": 0.0, "k": 1}]
    assert interrupted_point(grid, result) == {"temperature": 0.0, "k": 2}


# -- the window ------------------------------------------------------------------------------
@pytest.fixture
def slow_window(make_window, tmp_path):  # noqa: F811
    settings = tmp_path / "slow-settings.json"
    settings.write_text(json.dumps(SETTINGS))
    engine = SlowEngine()
    window = make_window(engine, settings_file=settings)
    window.prompt.set_text("w1 w2 w3 w4")
    return window


def _stop_mid_step(qtbot, window, busy) -> float:
    """Slow the target down, wait until a slow forward has begun, press Esc (Run ▸ Stop) in
    its middle and wait until `busy()` is false; -> the seconds from Stop to idle."""
    pace = window.engine.pace
    pace.slow(STEP)
    qtbot.waitUntil(pace.begun.is_set, timeout=60_000)
    qtbot.wait(int(STEP * 1000 / 3))
    assert window.actions.stop.isEnabled() and window.prompt.stop_button.isEnabled()
    pressed = time.monotonic()
    window.actions.stop.trigger()
    qtbot.waitUntil(lambda: not busy(), timeout=60_000)
    return time.monotonic() - pressed


def _report(job: str, seconds: float) -> None:
    print(f"\nstop to idle, {job} (window): {seconds:.2f} s with {STEP} s steps")
    assert seconds < WITHIN


def test_generate_stops_within_a_step_and_skips_its_reference(qtbot, slow_window):
    window = slow_window
    window.generate()
    seconds = _stop_mid_step(qtbot, window, lambda: window.controller.running)
    _report("generate", seconds)
    assert window.single.measured.stop_reason == "stopped"
    assert window.single.speedup_line == ""  # no reference was run after the Stop


def test_a_reference_in_the_background_gives_way_within_a_step(qtbot, slow_window):
    window = slow_window
    window.decoding.max_new_tokens.setValue(4)  # a short answer, then its reference
    window.engine.pace.slow(STEP)  # every step slow: the reference is seen while it runs
    window.generate()
    qtbot.waitUntil(lambda: window.controller.measuring_reference, timeout=60_000)
    assert window.ready() and window.actions.generate.isEnabled()
    seconds = _stop_mid_step(qtbot, window, lambda: window.controller.measuring_reference)
    _report("reference in the background", seconds)
    assert "cancelled its autoregressive reference" in window.summary.text()


def test_compare_stops_within_a_step(qtbot, slow_window):
    window = slow_window
    window.run_compare()
    seconds = _stop_mid_step(qtbot, window, lambda: window.controller.running)
    _report("compare", seconds)
    assert len(window.compare.results) <= 1


def test_a_chat_turn_stops_within_a_step(qtbot, slow_window):
    window = slow_window
    window.show_chat()
    window.generate()
    seconds = _stop_mid_step(qtbot, window, lambda: window.controller.running)
    _report("chat", seconds)


def test_tune_stops_within_a_step_keeps_the_finished_points_and_the_k(qtbot, slow_window):
    window = slow_window
    window.decoding.k.setValue(5)
    window.decoding.max_new_tokens.setValue(16)
    assert window.sweep.tune()
    assert window.prompt.stop_button.isEnabled()  # the Stop button is live during a Tune
    qtbot.waitUntil(lambda: "1/6 points" in window.sweep.view.status.text(), timeout=60_000)
    seconds = _stop_mid_step(qtbot, window, lambda: window.sweep.running)
    _report("tune", seconds)
    result = window.sweep.last_result
    assert result.stopped and len(result.table) >= 1
    assert window.decoding.k.value() == 5
    assert "short" in window.sweep.view.status.toolTip()  # names the value cut short


def test_a_sweep_stops_within_a_step_and_marks_the_point_cut_short(qtbot, slow_window):
    window = slow_window
    window.decoding.max_new_tokens.setValue(16)
    view = window.sweep.view
    view.k_values.setText("1,2,3,4")
    view.temperatures.setText("0")
    assert window.sweep.run_sweep()
    qtbot.waitUntil(lambda: len(view.records) >= 1, timeout=60_000)
    seconds = _stop_mid_step(qtbot, window, lambda: window.sweep.running)
    _report("sweep", seconds)
    measured = len(view.records)
    assert 1 <= measured < 4
    cut = (0, measured)  # the next column after the measured ones
    assert view.labels[cut].textItem.toPlainText() == "stopped"
    assert "short" in view.status.text()


# -- the Train tab's children: the data job and training --------------------------------------
UNIT = 3.0  # seconds a slowed answer batch or training step takes
EXIT = 6.0  # a child's own exit after Stop: a busy machine's interpreter teardown of torch


def _esc_in_the_tab(qtbot, controller) -> float:
    """Esc while the Train tab has the focus; -> seconds until no child runs."""
    from PySide6.QtCore import Qt

    view = controller.view
    assert view.stop_button.isEnabled() and controller.stop_action.isEnabled()
    view.window().activateWindow()
    view.stop_button.setFocus()
    qtbot.waitUntil(view.stop_button.hasFocus, timeout=5000)
    pressed = time.monotonic()
    qtbot.keyClick(view.stop_button, Qt.Key.Key_Escape)
    qtbot.waitUntil(lambda: not controller.running, timeout=60_000)
    return time.monotonic() - pressed


@pytest.mark.slow
def test_the_data_job_stops_within_a_batch_on_esc(qtbot, make_window, train_target, monkeypatch):
    from app.training_plan import read_generation

    window = make_window()
    controller = train_tab(window, train_target, monkeypatch, generation=UNIT, training=0)
    controller.view.start_button.click()
    qtbot.waitUntil(lambda: read_generation(controller.plan.work) is not None, timeout=120_000)
    qtbot.wait(int(UNIT * 1000 / 2))  # inside an answer batch
    seconds = _esc_in_the_tab(qtbot, controller)
    print(f"\nstop to idle, data (window): {seconds:.2f} s with {UNIT} s answer batches")
    assert seconds < UNIT + EXIT + SLACK  # within the batch, then the child's own exit
    assert read_generation(controller.plan.work).state == "stopped"
    assert controller.view.resume_button.isEnabled()


@pytest.mark.slow
def test_training_stops_within_a_batch_on_esc(qtbot, make_window, train_target, monkeypatch):
    from app.training_plan import read_training

    window = make_window()
    controller = train_tab(window, train_target, monkeypatch, generation=0, training=UNIT)
    controller.view.start_button.click()

    def in_a_batch() -> bool:
        progress = read_training(controller.plan) if controller.plan else None
        return (
            progress is not None
            and progress.stage == "training"
            and "running" in (progress.note or "")
        )

    qtbot.waitUntil(lambda: controller.step == "training", timeout=300_000)
    qtbot.waitUntil(in_a_batch, timeout=120_000)
    seconds = _esc_in_the_tab(qtbot, controller)
    print(f"\nstop to idle, train (window): {seconds:.2f} s with {UNIT} s training steps")
    assert seconds < UNIT + EXIT + SLACK
    assert "stopped" in controller.view.state.text()
    assert "batch" in controller.view.training_text.text()  # progress inside the batch
