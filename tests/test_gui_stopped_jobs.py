"""A job Stop ends looks stopped, never finished: a Compare's partial rows and the methods it
never ran, a Tune's partial table; and a long job says how far it is while it runs."""

from __future__ import annotations

from app.widgets.compare_table import HEADERS
from tests.gui_fake import FakeEngine
from tests.gui_window import make_window_fixture, wait_idle  # noqa: F401  (fixture)


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
    tokens = table.item(0, HEADERS.index("Tokens")).text()
    assert tokens == f"{engine.summaries[-1].new_tokens}, stopped"
    assert engine.summaries[-1].new_tokens < 32
    assert table.item(0, HEADERS.index("Identical to AR")).text() == "—"  # no whole answer
    assert "partial run" in table.item(0, HEADERS.index("Tokens")).toolTip()
    note = window.compare.stopped_note
    assert note.isVisibleTo(window)
    assert "Autoregressive was cut short" in note.text()
    assert "Classic draft did not run" in note.text()
    assert "(stopped)" in window.compare.columns.columns["ar"].footer.text()


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
