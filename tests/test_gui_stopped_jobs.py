"""A job Stop ends looks stopped, never finished: a Compare's partial rows and the methods it
never ran, a Tune's partial table; and a long job says how far it is while it runs."""

from __future__ import annotations

import threading

from app.widgets.compare_table import HEADERS
from tests.gui_fake import FakeEngine, FakeMeasure
from tests.gui_window import make_window_fixture, wait_idle  # noqa: F401  (fixture)


class HeldMeasure(FakeMeasure):
    """The fake measurement, each call after the first `calls` held until `release`."""

    def __init__(self, calls: int) -> None:
        super().__init__()
        self.held_after, self.release = calls, threading.Event()

    def __call__(self, method, config, reference):
        if len(self.calls) >= self.held_after:
            self.release.wait(5)
        return super().__call__(method, config, reference)


def test_a_compare_stopped_during_autoregressive_marks_its_row_and_names_what_never_ran(
    make_window, qtbot
):
    engine = FakeEngine(steps=32, delay=0.02)
    window = make_window(engine)
    window.prompt.set_text("Explain why the sky is blue.")
    window.run_compare()
    qtbot.waitUntil(lambda: engine.produced >= 5, timeout=5000)
    window.stop()
    wait_idle(qtbot, window)
    table = window.compare.table
    assert table.rowCount() == 1  # autoregressive only: Classic draft never ran
    assert table.item(0, 0).text() == "Autoregressive (stopped)"
    tokens = table.item(0, HEADERS.index("Tokens")).text()
    assert tokens == str(engine.summaries[-1].new_tokens)  # the fake's config names no most
    assert engine.summaries[-1].new_tokens < 32
    assert table.item(0, HEADERS.index("Identical to AR")).text() == "—"  # no whole answer
    assert "partial run" in table.item(0, HEADERS.index("Tokens")).toolTip()
    assert "partial run" in table.item(0, 0).toolTip()
    note = window.compare.stopped_note
    assert note.isVisibleTo(window)
    assert "Autoregressive was cut short" in note.text()
    assert "Classic draft did not run" in note.text()
    assert "(stopped)" in window.compare.columns.columns["ar"].footer.text()


def test_a_stopped_run_counts_its_tokens_of_the_most_it_was_asked_for():
    from dataclasses import replace

    from app.export import CompareResult
    from app.widgets.compare_table import name_cell, tokens_cell
    from tests.test_speedup_bound import AR

    cut = replace(AR, stop_reason="stopped", new_tokens=13, config={"max_new_tokens": 32})
    result = CompareResult("ar", "Autoregressive", "#000000", cut)
    assert (name_cell(result), tokens_cell(result)) == ("Autoregressive (stopped)", "13 of 32")
    whole = CompareResult("ar", "Autoregressive", "#000000", AR)
    assert (name_cell(whole), tokens_cell(whole)) == ("Autoregressive", str(AR.new_tokens))


def test_a_finished_compare_reads_as_before(make_window, qtbot):
    engine = FakeEngine(steps=8)
    window = make_window(engine)
    window.prompt.set_text("Explain why the sky is blue.")
    window.run_compare()
    wait_idle(qtbot, window)
    table = window.compare.table
    assert table.rowCount() == 2
    assert table.item(0, HEADERS.index("Tokens")).text() == "8"
    assert table.item(0, HEADERS.index("Identical to AR")).text() == "yes"
    assert not window.compare.stopped_note.isVisibleTo(window)


def test_tune_shows_points_done_the_point_measured_and_the_time_left_while_it_runs(
    make_window, qtbot
):
    engine = FakeEngine()
    window = make_window(engine)  # Classic draft: Tune measures k = 1, 2, 3, 4, 6, 8
    window.prompt.set_text("")  # Tune measures on its own prompts, not the prompt box
    measure, sweep = engine.measure, window.sweep
    measure.gate.clear()  # the first point waits inside its first measurement
    assert sweep.tune()
    line = sweep.view.status.text()
    assert line.startswith(
        "tuning the draft length k for Classic draft on 3 tuning prompts: 0/6 points; "
        "measuring 1 drafted token per step (0m0"
    )
    assert line.endswith("the time left is known after the first point")
    counted = "measuring 1 drafted token per step (0m01s in)"  # the point in flight, timed
    qtbot.waitUntil(lambda: counted in sweep.view.status.text(), timeout=3000)
    assert window.status.currentMessage() == sweep.view.status.text()
    seen: list[str] = []
    window.status.messageChanged.connect(seen.append)
    measure.gate.set()
    qtbot.waitUntil(lambda: not sweep.running, timeout=5000)
    second = next(line for line in seen if ": 1/6 points" in line)
    assert "measuring 2 drafted tokens per step (0m00s in); about " in second
    assert second.endswith(" left")


def test_a_stopped_tune_shows_its_partial_table_with_the_value_cut_short_labelled(
    make_window, qtbot
):
    engine = FakeEngine()
    engine.measure = HeldMeasure(calls=3)  # ar, k = 1, k = 2; k = 3 waits
    window = make_window(engine)
    measure, sweep = engine.measure, window.sweep
    assert sweep.tune()
    qtbot.waitUntil(lambda: sweep.done >= 2, timeout=5000)
    sweep.stop()
    measure.release.set()
    qtbot.waitUntil(lambda: not sweep.running, timeout=5000)
    assert sweep.view.status.text().startswith("Tune of Classic draft stopped after ")
    box = sweep.result_box
    assert box is not None and box.windowTitle() == "Tune k stopped: Classic draft"
    table = box.text().split("\n\n", 1)[1].splitlines()[2:]
    measured = len(sweep.last_result.table)
    assert measured >= 2 and "chosen" not in box.text()  # a partial table picks nothing
    assert table[measured].split() == [
        str((1, 2, 3, 4, 6, 8)[measured]),
        "stopped",
        "(cut",
        "short)",
    ]
    assert all(row.endswith("not measured") for row in table[measured + 1 :])
    assert "3 tuning prompts, not the prompt box" in box.text()
