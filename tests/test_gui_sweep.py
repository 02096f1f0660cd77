"""The Sweep tab and Run ▸ Tune k, on the fake engine with a fake measurement (no model loads)."""

from __future__ import annotations

import threading

import pytest
from PySide6.QtCore import QPointF

from specdec_core.errors import SpecdecError
from tests.gui_fake import FakeEngine
from tests.gui_window import make_window_fixture  # noqa: F401  (fixture)


@pytest.fixture
def sweep_window(make_window):  # noqa: F811
    engine = FakeEngine()
    window = make_window(engine)
    window.decoding.apply({**window.decoding.values(), "method": "classic"})
    window.prompt.set_text("Tell me a story.")
    return window


def _run(qtbot, window, k="1,2,3", temperatures="0,0.7"):
    view = window.sweep.view
    view.k_values.setText(k)
    view.temperatures.setText(temperatures)
    assert window.sweep.run_sweep()
    qtbot.waitUntil(lambda: not window.sweep.running, timeout=5000)
    return view


def test_sweep_tab_and_tune_action_are_installed(sweep_window):
    tabs = [sweep_window.tabs.tabText(i) for i in range(sweep_window.tabs.count())]
    assert "Sweep" in tabs
    run_menu = next(a.menu() for a in sweep_window.menuBar().actions() if "Run" in a.text())
    assert sweep_window.sweep.tune_action in run_menu.actions()


def test_heatmap_has_one_cell_per_grid_point(qtbot, sweep_window):
    view = _run(qtbot, sweep_window, k="1,2,3,4", temperatures="0,0.7,1.0")
    assert len(view.cells) == 12
    assert len(view.records) == 12  # every cell measured and coloured
    assert view.labels[(0, 2)].textItem.toPlainText() == "1.90x"  # k=3, temperature 0
    assert sweep_window.sweep.last_result.best().point == {"temperature": 0.0, "k": 3}
    measured = [c for m, c in sweep_window.engine.measure.calls if m == "classic"]
    assert all(c["policy"] == "lossless" for c in measured)


def test_tree_method_sweeps_tree_sizes(qtbot, sweep_window):
    sweep_window.decoding.apply({**sweep_window.decoding.values(), "method": "eagle2"})
    view = sweep_window.sweep.view
    view.tree_tokens.setText("16,32")
    view = _run(qtbot, sweep_window, temperatures="0")
    assert view.axis == "tree_tokens"
    assert len(view.cells) == 2


def test_clicking_a_cell_sets_the_sliders(qtbot, sweep_window):
    view = _run(qtbot, sweep_window, k="2,6", temperatures="0,0.7")
    view.click_at(QPointF(1.5, 1.5))  # column k=6, row temperature 0.7
    assert sweep_window.decoding.k.value() == 6
    assert sweep_window.decoding.temperature.value() == pytest.approx(0.7)
    assert sweep_window.decoding.method_name() == "classic"


def test_clicking_the_scene_maps_to_a_cell(qtbot, sweep_window):
    view = _run(qtbot, sweep_window, k="2,6", temperatures="0,0.7")
    scene_pos = view.plot.getViewBox().mapViewToScene(QPointF(0.5, 0.5))

    class Click:
        def scenePos(self):
            return scene_pos

    view.on_click(Click())
    assert sweep_window.decoding.k.value() == 2
    assert sweep_window.decoding.temperature.value() == pytest.approx(0.0)


def test_stop_keeps_the_points_measured(qtbot, sweep_window):
    measure = sweep_window.engine.measure
    measure.gate.clear()
    view = sweep_window.sweep.view
    view.k_values.setText("1,2,3,4")
    view.temperatures.setText("0")
    assert sweep_window.sweep.run_sweep()
    sweep_window.sweep.stop()
    measure.gate.set()
    qtbot.waitUntil(lambda: not sweep_window.sweep.running, timeout=5000)
    assert len(view.cells) == 4
    assert len(view.records) < 4


def test_bad_grid_is_a_message_not_a_crash(sweep_window):
    sweep_window.sweep.view.k_values.setText("1,two")
    assert not sweep_window.sweep.run_sweep()
    assert "comma-separated" in sweep_window.last_error


def test_jsonl_prompts(qtbot, sweep_window, tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "a"}\n{"prompt": "b"}\n')
    view = sweep_window.sweep.view
    view.prompt_file.setText(str(path))
    view.prompt_source.setCurrentText("JSONL file")
    _run(qtbot, sweep_window, k="1", temperatures="0")
    assert [request.prompts for request in sweep_window.engine.sweeps] == [("a", "b")]


def test_tune_applies_the_argmax_k(qtbot, sweep_window):
    sweep_window.decoding.k.setValue(8)
    assert sweep_window.sweep.tune()
    qtbot.waitUntil(lambda: not sweep_window.sweep.running, timeout=5000)
    result = sweep_window.sweep.last_result
    best = max(result.table, key=lambda row: row.speedup_vs_ar)
    assert result.k == best.k == 3
    assert sweep_window.decoding.k.value() == 3
    box = sweep_window.sweep.result_box
    assert box.windowTitle() == "Tune k: Classic draft"
    assert box.text().startswith(
        "Tune chose 3 drafted tokens per step for Classic draft: 1.90× vs autoregressive (τ 2.00)"
    )


def test_tune_on_the_default_tree_method_applies_the_best_tree_size(qtbot, sweep_window):
    sweep_window.decoding.apply({**sweep_window.decoding.values(), "method": "eagle2-lookup"})
    assert sweep_window.sweep.tune()
    qtbot.waitUntil(lambda: not sweep_window.sweep.running, timeout=5000)
    result = sweep_window.sweep.last_result
    assert result.setting == "tree_tokens" and [r.k for r in result.table] == [4, 8, 16, 32]
    assert result.k == 4  # the fake measurement's fastest size (1.70x)
    assert sweep_window.decoding.tree_tokens.value() == 4
    box = sweep_window.sweep.result_box
    assert box.windowTitle() == "Tune the tree size: EAGLE-2 + lookup"
    assert box.text().startswith(
        "Tune chose a tree of 4 tokens for EAGLE-2 + lookup: 1.70× vs autoregressive"
    )
    assert "tokens" in result.format_table().splitlines()[0]


def test_stop_ends_tune_k_after_the_current_point_and_keeps_k(qtbot, sweep_window):
    measure = sweep_window.engine.measure
    measure.gate.clear()  # the tuning waits inside its first measurement
    sweep_window.decoding.k.setValue(8)
    assert sweep_window.sweep.tune()
    assert sweep_window.actions.stop.isEnabled()  # Run ▸ Stop reaches a Tune too
    sweep_window.stop()
    measure.gate.set()
    qtbot.waitUntil(lambda: not sweep_window.sweep.running, timeout=5000)
    assert len(measure.calls) <= 2  # ar and the first k at most: of 7 measurements
    result = sweep_window.sweep.last_result
    assert result.stopped and len(result.table) <= 1
    assert sweep_window.decoding.k.value() == 8  # a partial table picks no k
    line = sweep_window.sweep.view.status.text()
    assert line.startswith("Tune of Classic draft stopped after ")
    assert "it keeps 8 drafted tokens per step" in line


def test_closing_the_window_mid_tune_ends_the_tuning(qtbot, sweep_window):
    measure = sweep_window.engine.measure
    measure.gate.clear()  # the tuning waits inside its first measurement
    assert sweep_window.sweep.tune()
    stop_flag = sweep_window.sweep.job.worker.stop_flag
    opener = threading.Thread(target=lambda: stop_flag.wait(10) and measure.gate.set())
    opener.start()  # the measurement in flight ends when closing sets Stop
    qtbot.waitUntil(lambda: sweep_window.jobs.live_threads() == 1, timeout=5000)
    sweep_window.close()
    opener.join()
    assert sweep_window.jobs.live_threads() == 0
    assert len(measure.calls) <= 2  # it stopped, not ran through every k


def test_parse_values_rejects_empty():
    from app.widgets.sweep_view import parse_values

    with pytest.raises(SpecdecError):
        parse_values(" , ", int, "k")
    assert parse_values("1, 2,2", int, "k") == [1, 2]


def test_threshold_sweep_of_a_lossy_policy_shows_the_tradeoff(qtbot, sweep_window):
    sweep_window.decoding.apply({**sweep_window.decoding.values(), "policy": "threshold"})
    assert sweep_window.decoding.is_lossy()
    view = sweep_window.sweep.view
    view.thresholds.setText("0.1,0.3,0.5")
    _run(qtbot, sweep_window, temperatures="0,1.0")
    assert view.axis == "policy_params.tau"
    assert view.plot.getAxis("bottom").labelText == "policy tau"  # not "draft length k"
    assert len(view.cells) == 6
    assert len(view.tradeoff_points.data) == 6 and not view.tradeoff.isHidden()
    measured = [c for m, c in sweep_window.engine.measure.calls if m == "classic"]
    assert sorted({c["policy_params"]["tau"] for c in measured}) == [0.1, 0.3, 0.5]
    view.select_cell(0, 2)
    assert sweep_window.decoding.params["tau"].value() == pytest.approx(0.5)


def test_thresholds_need_a_lossy_policy(sweep_window):
    sweep_window.sweep.view.thresholds.setText("0.1")
    assert not sweep_window.sweep.run_sweep()
    assert "lossy policy" in sweep_window.last_error


def test_closing_the_window_mid_sweep_leaves_no_live_thread(qtbot, sweep_window):
    sweep_window.engine.measure.gate.clear()  # the sweep waits inside its first measurement
    view = sweep_window.sweep.view
    view.k_values.setText("1,2,3")
    view.temperatures.setText("0")
    assert sweep_window.sweep.run_sweep()
    qtbot.waitUntil(lambda: sweep_window.jobs.live_threads() == 1, timeout=5000)
    sweep_window.engine.measure.gate.set()  # a measurement in flight ends; Stop ends the rest
    sweep_window.close()
    assert sweep_window.jobs.live_threads() == 0


def test_sweep_and_tune_name_the_method_as_the_method_box_and_speak_in_words(qtbot, sweep_window):
    window, view = sweep_window, sweep_window.sweep.view
    notes: list[str] = []
    window.status.messageChanged.connect(notes.append)
    window.decoding.apply({**window.decoding.values(), "method": "eagle2-lookup"})
    view.tree_tokens.setText("16,32")
    view.temperatures.setText("0")
    window.engine.measure.gate.clear()  # the sweep waits inside its first measurement
    assert window.sweep.run_sweep()
    assert view.status.text().startswith(
        "sweeping EAGLE-2 + lookup: 0/2 points; measuring temperature 0, a tree of 16 tokens ("
    )
    window.engine.measure.gate.set()
    qtbot.waitUntil(lambda: not window.sweep.running, timeout=5000)
    assert any(
        note.startswith("sweeping EAGLE-2 + lookup: 1/2 points; measuring ") for note in notes
    )
    assert "sweeping EAGLE-2 + lookup: 2/2 points" in notes
    assert view.status.text() == (
        "2 points of EAGLE-2 + lookup measured; fastest: 1.32× vs autoregressive at "
        "temperature 0, a tree of 32 tokens; click a cell to use it"
    )
    view.select_cell(0, 0)
    assert notes[-1] == "applied temperature 0, a tree of 16 tokens"
    window.engine.measure.gate.clear()
    assert window.sweep.tune()
    tuning = "tuning the tree size for EAGLE-2 + lookup on 3 tuning prompts"
    assert view.status.text().startswith(f"{tuning}: 0/4 points; measuring a tree of 4 tokens (")
    assert notes[-1] == view.status.text()
    window.engine.measure.gate.set()
    qtbot.waitUntil(lambda: not window.sweep.running, timeout=5000)
    assert any(note.startswith(f"{tuning}: 1/4 points") for note in notes)  # four tree sizes
    assert notes[-1] == "applied a tree of 4 tokens"
    seen = [*notes, view.status.text(), window.sweep.result_box.text()]
    assert not [line for line in seen if "eagle2" in line or "tree_tokens" in line]
