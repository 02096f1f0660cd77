"""At 1280×800 the window shows what it says whole: Compare's table without scrolling sideways
(every method's real label, the speedup and identity columns in view), the Train tab mid-run
with its progress lines wrapped and its plot's axis and legend unclipped, the first run's
note on the status bar cut with "…" at most, never mid-word; a failed load names the loaded
model in the Target box again."""

from __future__ import annotations

import json
import time

from PySide6.QtCore import QRect

from app import screen
from app.engine import SpecdecEngine
from app.training_plan import TrainingPlan
from app.widgets.compare_panel import ALL_LOSSLESS
from app.widgets.compare_table import HEADERS
from specdec_core.errors import SpecdecError
from tests.gui_fake import FakeEngine
from tests.gui_window import make_window_fixture  # noqa: F401 (a fixture)

SMALL = (1280, 800)


def _small(monkeypatch, qtbot, window) -> None:
    monkeypatch.setattr(screen, "available", lambda widget: QRect(0, 0, *SMALL))
    window.resize(*SMALL)
    qtbot.wait(50)
    assert (window.width(), window.height()) == SMALL


def _real_names() -> FakeEngine:
    engine = FakeEngine(steps=8)
    engine.registries = SpecdecEngine().registries  # every method, with its real label
    return engine


def test_compare_shows_every_column_without_scrolling_at_1280(make_window, qtbot, monkeypatch):
    window = make_window(_real_names())
    _small(monkeypatch, qtbot, window)
    names = [m.name for m in window.registries.methods if m.name != "ar"]
    window.compare.set_selected(names[:8])
    window.prompt.set_text("Tell me a story.")
    window.run_compare()
    qtbot.waitUntil(lambda: not window.controller.running, timeout=20_000)
    qtbot.wait(50)
    table = window.compare.table
    assert table.rowCount() == 9
    assert not table.horizontalScrollBar().isVisible()
    header = table.horizontalHeader()
    for label in ("Speedup vs AR", "Identical to AR"):
        column = HEADERS.index(label)
        right = header.sectionViewportPosition(column) + header.sectionSize(column)
        assert right <= table.viewport().width(), label  # in view, not behind a scroll
        lines = table.horizontalHeaderItem(column).text().splitlines()
        widest = max(header.fontMetrics().horizontalAdvance(line) for line in lines)
        assert widest < header.sectionSize(column), label  # the header whole
    assert table.isColumnHidden(HEADERS.index("Policy"))  # every run was lossless: said
    assert table.horizontalHeaderItem(0).text() == ALL_LOSSLESS
    for row in range(table.rowCount()):  # a name cut with "…" is whole in its tooltip
        assert table.item(row, 0).toolTip() == table.item(row, 0).text()


def test_the_train_tab_mid_run_fits_1280_by_800(make_window, qtbot, monkeypatch, tmp_path):
    window = make_window()
    training, view = window.training, window.training.view
    window.tabs.setCurrentWidget(view)
    work = tmp_path / ("a-rather-long-work-folder-name-that-would-widen-a-label-" * 3)
    (work / "data").mkdir(parents=True)
    (work / "head").mkdir(parents=True)
    training.plan = TrainingPlan(target="embedded", work=work, tokens=20_000, seconds=600)
    training.began = time.monotonic() - 200
    status = {
        "state": "running", "message": "", "answer_tokens": 1200, "budget": 20_000,
        "tokens_per_s": 48.0, "eta_s": 391, "sources": {"magpie": {"batches": 9}},
    }  # fmt: skip
    (work / "data" / "status.json").write_text(json.dumps(status))
    progress = {
        "epoch": 1.5, "step": 9, "steps": 12, "tokens_per_s": 91.0, "eta_s": 36.0,
        "finished": False, "stage": "training", "tokens": 30_000, "tokens_total": 40_000,
        "budget_left_s": 41.0, "note": "epoch 2, batch 4/6 running 0m12s",
        "validation": [{"epoch": 1, "step": 6, "teacher_forced_top1": 0.44, "tau": 1.71}],
    }  # fmt: skip
    (work / "head" / "progress.json").write_text(json.dumps(progress))
    training.step, training.step_began = "training", time.monotonic() - 80
    view.show_work(str(work))
    training.poll()
    _small(monkeypatch, qtbot, window)
    assert "running 0m12s" in view.training_text.text()  # inside a batch
    assert "budget 0m41s left" in view.training_text.text()
    for label in (view.generation_text, view.training_text, view.state):
        assert label.wordWrap()
        assert label.width() <= view.width()
    assert view.work.toolTip() == str(work)  # cut at the edge, whole in its tooltip
    assert view.plot.height() >= 150
    axis = view.plot.getAxis("left")
    assert axis.labelText == "top-1, τ"
    assert axis.label.boundingRect().width() < view.plot.height()  # the rotated label fits
    assert "τ" in view.legend.text() and view.legend.isVisible()


def test_the_first_run_note_fits_the_status_bar_at_1280(make_window, qtbot, monkeypatch):
    monkeypatch.setattr(screen, "available", lambda widget: QRect(0, 0, *SMALL))
    window = make_window(_real_names(), fresh=True)
    window.resize(*SMALL)
    qtbot.wait(50)
    note = window.status.currentMessage()
    assert note.startswith("selected ") and "Compare" in note
    room = window.status.width() - sum(
        label.width() for label in (window.status.state, window.status.device,
                                    window.status.model, window.status.memory)
    )  # fmt: skip
    assert window.status.fontMetrics().horizontalAdvance(note) < room
    assert "why" in note and window.loader.first_choice_reason in window.output.summary.text()
    window.state.note("x " * 400)  # a note longer than the bar: cut with "…", whole in a tip
    assert window.status.currentMessage().endswith("…")
    assert window.status.toolTip() == "x " * 400


def test_a_failed_load_puts_the_loaded_model_back_in_the_target_box(make_window, qtbot):
    engine = FakeEngine()
    window = make_window(engine)
    loaded = window.target.spec

    def fail(target, *args):
        raise SpecdecError(f"model not found: {target.spec}")

    engine.load_target = fail
    window.models.target.set_spec("/no/such/model")
    window.load_target()
    qtbot.waitUntil(lambda: window.last_error is not None, timeout=5000)
    assert window.models.target.spec() == loaded
    assert "/no/such/model" in window.models.message.text()
