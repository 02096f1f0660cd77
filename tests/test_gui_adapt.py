"""The Adaptation box: the head adapts after a run queue, in a worker, never during a run;
τ before and after is shown; Reset and Save go to the engine."""

from __future__ import annotations

from tests.gui_fake import FakeEngine
from tests.gui_window import make_window_fixture, wait_idle  # noqa: F401  (fixture)


def _adapted(qtbot, window) -> None:
    qtbot.waitUntil(lambda: not window.adaptation.running and window.ready(), timeout=5000)


def test_with_adaptation_on_the_head_adapts_after_each_run_never_during_one(make_window, qtbot):
    engine = FakeEngine(steps=6)
    window = make_window(engine)
    window.generate()
    wait_idle(qtbot, window)
    _adapted(qtbot, window)
    assert engine.adapt_calls == [] and not engine.adapting  # off by default
    window.adapt_panel.enabled.setChecked(True)
    assert engine.adapting
    for _ in range(2):
        window.generate()
        wait_idle(qtbot, window)
        _adapted(qtbot, window)
    assert engine.adapt_calls == [False, False]  # once per run queue, no run in progress
    assert "before adaptation → 2.50" in window.adapt_panel.tau.text()
    window.adapt_panel.reset.click()
    _adapted(qtbot, window)
    assert engine.adapt_calls == [] and window.adapt_panel.tau.text() == ""


def test_reset_and_save_are_off_until_a_head_has_adapted_and_off_again_after_reset(
    make_window, qtbot
):
    window = make_window()  # Classic draft: a method without a head
    panel = window.adapt_panel
    assert not panel.reset.isEnabled() and not panel.save.isEnabled()
    assert "no head has adapted yet" in panel.save.toolTip()
    window.generate()
    wait_idle(qtbot, window)
    _adapted(qtbot, window)
    assert not panel.save.isEnabled()  # Adapt is off: nothing adapted
    panel.enabled.setChecked(True)
    window.generate()
    wait_idle(qtbot, window)
    _adapted(qtbot, window)
    assert panel.reset.isEnabled() and panel.save.isEnabled()
    panel.reset.click()
    _adapted(qtbot, window)
    assert not panel.reset.isEnabled() and not panel.save.isEnabled()


def test_save_asks_for_a_directory_and_reports_where_it_went(make_window, qtbot, tmp_path):
    window = make_window()
    window.adapt_panel.enabled.setChecked(True)
    window.generate()
    wait_idle(qtbot, window)
    _adapted(qtbot, window)
    window.adaptation.ask_directory = lambda: str(tmp_path / "mine")
    window.adapt_panel.save.click()
    _adapted(qtbot, window)
    assert str(tmp_path / "mine") in window.status.currentMessage()


def test_closing_the_window_mid_adaptation_ends_it_and_leaves_no_live_thread(make_window, qtbot):
    import threading
    import time

    engine = FakeEngine(steps=3)
    started = threading.Event()
    adapt = engine.adapt

    def within_its_budget(budget_seconds, progress):
        started.set()
        time.sleep(budget_seconds)  # the engine's fine-tuning stops at its time budget
        return adapt(budget_seconds, progress)

    engine.adapt = within_its_budget
    window = make_window(engine)
    window.adapt_panel.enabled.setChecked(True)
    window.generate()
    wait_idle(qtbot, window)
    assert started.wait(5) and window.adaptation.running
    window.close()
    assert window.controller.live_threads() == 0


def test_switching_adaptation_during_a_run_tells_the_engine_when_the_run_ends(make_window, qtbot):
    engine = FakeEngine(steps=400, delay=0.01)
    told: list[bool] = []
    engine.set_adapt = told.append  # the engine process would be busy with the run meanwhile
    window = make_window(engine)
    told.clear()
    window.generate()
    qtbot.waitUntil(lambda: engine.produced > 0, timeout=5000)
    window.adapt_panel.enabled.setChecked(True)
    assert told == []  # the window does not wait for an engine that is running
    window.stop()
    wait_idle(qtbot, window)
    assert told == [True]


def test_a_dead_engine_met_by_the_adapt_switch_is_one_line_and_restart_tells_it_again(
    make_window, qtbot
):
    from app.process_engine import ENDED, EngineProcessError

    engine = FakeEngine()
    told: list[bool] = []

    def dead(on: bool) -> None:
        raise EngineProcessError(f"{ENDED} (exit code -9); press Restart engine")

    window = make_window(engine)
    engine.set_adapt = dead
    window.adapt_panel.enabled.setChecked(True)
    assert window.last_error == f"EngineProcessError: {ENDED} (exit code -9); press Restart engine"
    assert not window.ready()
    engine.set_adapt = told.append
    restart = next(b for b in window.error_box.buttons() if b.text() == "Restart engine")
    restart.click()
    qtbot.waitUntil(window.ready, timeout=5000)
    assert told == [True]  # the new engine adapts, as the switch says
