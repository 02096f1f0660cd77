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


def test_save_asks_for_a_directory_and_reports_where_it_went(make_window, qtbot, tmp_path):
    window = make_window()
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
