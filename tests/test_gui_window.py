"""The main window on a fake event stream: generate, stop, compare, errors, shutdown."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from PySide6.QtCore import Qt

from app.widgets.decoding_panel import MAX_NEW_TOKENS
from specdec_core.decoding.events import TokenKind
from specdec_core.errors import SpecdecError
from tests.gui_fake import FakeEngine
from tests.gui_window import make_window_fixture, wait_idle  # noqa: F401  (fixture)


def _generate_failing(qtbot, window, engine: FakeEngine, error: Exception) -> None:
    """Generate once with `engine` raising `error`, and wait until the window is idle again."""
    engine.fail_next = error
    window.generate()
    wait_idle(qtbot, window)


def test_generate_streams_tokens_into_the_view_and_the_plots(make_window, qtbot):
    window = make_window()
    window.decoding.k.setValue(6)
    window.generate()
    wait_idle(qtbot, window)
    request, reference = window.engine.requests
    assert request.method == "classic" and request.config.k == 6
    assert reference.method == "ar" and reference.prompt == request.prompt
    kinds = {t.kind for t in window.token_view.tokens}
    assert {TokenKind.ACCEPTED_DRAFT, TokenKind.CORRECTION, TokenKind.BONUS} <= kinds
    assert "τ = 2.75" in window.summary.text()
    assert len(window.plots.series["Classic draft"].steps) == 12
    assert window.status.state.text() == "ready"


def test_ctrl_return_generates(make_window, qtbot):
    window = make_window()
    qtbot.keyClick(window.prompt.editor, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    wait_idle(qtbot, window)
    assert [r.method for r in window.engine.requests] == ["classic", "ar"]  # run, reference
    assert "\n" not in window.prompt.text()


def test_methods_and_policies_come_from_the_registries(make_window):
    window = make_window()
    labels = [window.decoding.method.itemText(i) for i in range(window.decoding.method.count())]
    assert labels == ["Autoregressive", "Classic draft", "EAGLE", "EAGLE-2", "EAGLE-2 + lookup"]
    form = window.decoding.form
    assert not form.isRowVisible(window.decoding.tree_depth)
    window.decoding.select(window.decoding.method, "eagle2")
    assert form.isRowVisible(window.decoding.tree_depth)
    assert not window.decoding.lossy_badge.isVisibleTo(window)
    window.decoding.select(window.decoding.policy, "threshold")
    assert window.decoding.lossy_badge.isVisibleTo(window)
    assert window.decoding.policy.currentText() == "threshold (lossy)"
    assert set(window.compare.checks) == {"ar", "classic", "eagle", "eagle2", "eagle2-lookup"}


def test_stop_takes_effect_within_one_step(make_window, qtbot):
    engine = FakeEngine(steps=100_000, delay=0.02)
    window = make_window(engine)
    window.generate()
    qtbot.waitUntil(lambda: engine.produced >= 3, timeout=5000)
    qtbot.keyClick(window, Qt.Key.Key_Escape)
    wait_idle(qtbot, window, timeout=5000)
    assert engine.after_stop <= 1  # only the step that was being computed
    shown = len(window.plots.series["Classic draft"].steps)
    assert shown == engine.produced
    assert "stopped by the user" in window.summary.text()


def test_stop_takes_effect_within_one_step_even_if_the_engine_ignores_the_flag(make_window, qtbot):
    engine = FakeEngine(steps=100_000, delay=0.02, honour_stop=False)
    window = make_window(engine)
    window.generate()
    qtbot.waitUntil(lambda: engine.produced >= 3, timeout=5000)
    window.stop()
    wait_idle(qtbot, window, timeout=5000)
    # the step in flight is shown; the worker asks for at most one more, drops it and closes
    assert engine.after_stop <= 2
    shown = len(window.plots.series["Classic draft"].steps)
    assert shown <= engine.produced - engine.after_stop + 1


def test_compare_gives_one_column_per_method_and_a_filled_table(make_window, qtbot, tmp_path):
    window = make_window()
    window.compare.checks["eagle2"].setChecked(True)
    window.run_compare()
    wait_idle(qtbot, window)
    comparisons = {request.comparison for request in window.engine.requests}
    assert len(comparisons) == 1 and "" not in comparisons  # one suffix history snapshot
    assert list(window.compare.columns.columns) == ["ar", "classic", "eagle2"]
    colors = {c.color for c in window.compare.columns.columns.values()}
    assert len(colors) == 3
    table = window.compare.table
    assert table.rowCount() == 3
    for row in range(3):
        for column in range(table.columnCount()):
            assert table.item(row, column).text()
    assert table.item(0, 6).text() == "1.00×" and table.item(0, 7).text() == "yes"
    assert table.item(1, 4).text() == "2.75"
    cell = table.item(1, 6).text()  # "2.75× (2.00–3.58)": the ratio, its 95 % interval
    ratio, low, high = (
        float(x) for x in cell.replace("×", "").strip(")").replace("(", "–").split("–")
    )
    assert ratio == 2.75 and low < ratio < high
    assert "95% interval over both runs' steps" in table.item(1, 6).toolTip()
    assert "reference" in table.item(0, 6).toolTip()
    assert set(window.plots.series) == {"Autoregressive", "Classic draft", "EAGLE-2"}

    window.files.export("csv", tmp_path / "c.csv")
    window.files.export("json", tmp_path / "c.json")
    window.files.export("png", tmp_path / "c.png")
    lines = (tmp_path / "c.csv").read_text().splitlines()
    assert lines[0].startswith("method,label,policy") and len(lines) == 4
    assert lines[0].endswith(",speedup_interval_low,speedup_interval_high")
    data = json.loads((tmp_path / "c.json").read_text())
    assert [m["method"] for m in data["methods"]] == ["ar", "classic", "eagle2"]
    classic = data["methods"][1]
    assert classic["speedup_interval_low"] < classic["speedup_vs_ar"]
    assert classic["speedup_vs_ar"] < classic["speedup_interval_high"]
    assert data["methods"][0]["speedup_interval_low"] is None  # ar: the reference itself
    assert (tmp_path / "c.png").stat().st_size > 1000


def test_an_engine_error_shows_a_message_and_the_next_generate_works(make_window, qtbot):
    engine = FakeEngine()
    window = make_window(engine)
    _generate_failing(qtbot, window, engine, SpecdecError("the prompt is empty; type a prompt"))
    qtbot.waitUntil(lambda: window.error_box is not None and window.error_box.isVisible())
    assert "type a prompt" in window.error_box.text()
    window.error_box.close()

    _generate_failing(qtbot, window, engine, RuntimeError("boom"))
    assert "RuntimeError: boom" in window.last_error

    window.generate()
    wait_idle(qtbot, window)
    assert window.token_view.tokens and "τ" in window.summary.text()


def test_a_failing_method_in_a_comparison_is_reported_and_the_others_still_run(make_window, qtbot):
    engine = FakeEngine()
    window = make_window(engine)
    engine.fail_methods["classic"] = SpecdecError("this install has no bundled draft")
    window.compare.checks["eagle2"].setChecked(True)
    window.run_compare()
    wait_idle(qtbot, window)
    assert [r.method for r in engine.requests] == ["ar", "classic", "eagle2"]
    assert window.last_error == "this install has no bundled draft"
    assert "failed: this install" in window.compare.columns.columns["classic"].footer.text()
    assert [r.method for r in window.compare.results] == ["ar", "eagle2"]
    assert window.compare.table.rowCount() == 2
    assert window.ready()


def test_an_error_in_a_generate_run_does_not_leave_a_queue(make_window, qtbot):
    engine = FakeEngine()
    window = make_window(engine)
    _generate_failing(qtbot, window, engine, SpecdecError("no draft"))
    assert len(engine.requests) == 1 and window.last_error == "no draft"
    assert window.ready()


def test_closing_during_a_run_leaves_no_live_thread(make_window, qtbot):
    engine = FakeEngine(steps=100_000, delay=0.01, honour_stop=False)
    window = make_window(engine)
    window.generate()
    qtbot.waitUntil(lambda: engine.produced >= 2, timeout=5000)
    job = window.controller.run_job
    assert job is not None and job.is_running()
    window.close()
    assert not job.thread.isRunning()
    assert window.controller.live_threads() == 0


def test_a_failed_model_load_keeps_the_loaded_model_and_the_window_usable(make_window, qtbot):
    engine = FakeEngine()
    window = make_window(engine)
    loaded = window.target

    def fail(target, progress, stop=None):
        raise SpecdecError(
            f"model not found: {target.spec}; give a model directory or a .gguf file"
        )

    engine.load_target = fail
    window.models.target.set_spec("/nope")
    window.load_target()
    qtbot.waitUntil(lambda: window.last_error is not None, timeout=5000)
    assert "model not found" in window.models.message.text()
    assert f"{loaded.spec} is still loaded" in window.last_error
    assert window.ready() and window.target == loaded and window.models.load_button.isEnabled()
    window.generate()  # Generate still works on the model that stayed loaded
    qtbot.waitUntil(lambda: window.summary.text() != "", timeout=5000)


def test_compare_names_the_methods_as_the_method_box_does(make_window):
    window = make_window()
    box = window.decoding.method
    labels = {box.itemData(i): box.itemText(i) for i in range(box.count())}
    assert {name: check.text() for name, check in window.compare.checks.items()} == labels
    assert window.compare.checks["eagle2-lookup"].text() == "EAGLE-2 + lookup"


def test_a_good_load_takes_the_failed_one_off_the_screen(make_window, qtbot):
    engine = FakeEngine()
    window = make_window(engine)
    good = engine.load_target

    def fail(target, *args):
        raise SpecdecError(f"model not found: {target.spec}")

    engine.load_target = fail
    window.load_target()
    qtbot.waitUntil(lambda: window.last_error is not None, timeout=5000)
    assert "model not found" in window.status.currentMessage()
    window.error_box.close()
    engine.load_target = good
    window.load_target()
    qtbot.waitUntil(lambda: not window.session.busy and len(engine.loads) == 2, timeout=5000)
    assert window.models.message.text().startswith("target embedded")
    assert "model not found" not in window.status.currentMessage()


@pytest.mark.parametrize("typed", ["999999", "999999999", "0"])
def test_a_max_new_tokens_out_of_range_is_refused_with_a_message_and_not_changed(
    make_window, qtbot, typed
):
    window = make_window()
    spin, note = window.decoding.max_new_tokens, window.decoding.max_note
    spin.setValue(64)
    spin.lineEdit().selectAll()
    qtbot.keyClicks(spin, typed)  # a plain spin box keeps 9999 of it, or goes back on 0
    window.generate()  # before Return: the number typed is what counts
    wait_idle(qtbot, window)
    assert window.engine.requests[0].config.max_new_tokens == 64  # refused: it stays
    assert spin.value() == 64 and spin.text() == "64"
    assert window.decoding.form.isRowVisible(note)
    assert note.text() == f"{typed} refused: type 1–{MAX_NEW_TOKENS}; it stays 64"
    spin.setValue(100)
    assert not window.decoding.form.isRowVisible(note)


def test_a_max_new_tokens_in_range_counts_as_typed_before_return(make_window, qtbot):
    window = make_window()
    spin = window.decoding.max_new_tokens
    spin.lineEdit().selectAll()
    qtbot.keyClicks(spin, "1280")
    window.generate()
    wait_idle(qtbot, window)
    assert window.engine.requests[0].config.max_new_tokens == 1280
    assert not window.decoding.form.isRowVisible(window.decoding.max_note)


def test_the_window_module_does_not_import_torch():
    """The window opens before torch is imported (the engine loads in a worker thread)."""
    code = "import sys, app.main_window; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_lossy_policy_shows_its_parameters_and_they_reach_the_engine(make_window, qtbot):
    window = make_window()
    assert not window.decoding.params
    window.decoding.select(window.decoding.policy, "threshold")
    assert window.decoding.form.isRowVisible(window.decoding.params_box)
    assert window.decoding.params["tau"].value() == 0.3
    window.decoding.params["tau"].setValue(0.15)
    window.generate()
    wait_idle(qtbot, window)
    config = window.engine.requests[0].config
    assert config.policy == "threshold" and config.policy_params == {"tau": 0.15}
    assert window.engine.requests[1].config.policy == "lossless"  # the reference is exact
    assert "LOSSY" in window.summary.text()


def test_each_finished_run_is_appended_to_the_history(make_window, qtbot, tmp_path):
    window = make_window()
    window.generate()
    wait_idle(qtbot, window)
    lines = (tmp_path / "data" / "history.jsonl").read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["method"] == "classic"


def test_a_draft_that_worked_is_remembered_in_its_picker(make_window, qtbot):
    window = make_window()
    window.models.draft.set_spec("someone/tiny-draft")
    window.generate()
    wait_idle(qtbot, window)
    assert window.engine.requests[0].specs["draft"] == "someone/tiny-draft"
    assert window.models.draft.recent() == ["someone/tiny-draft"]


def test_menus_and_about_versions(make_window):
    from app.menus import versions

    window = make_window()
    titles = [action.text() for action in window.menuBar().actions()]
    assert titles == ["&File", "&Run", "&View", "&Help"]
    assert window.actions.generate.shortcut().toString() == "Ctrl+Return"
    assert window.actions.stop.shortcut().toString() == "Esc"
    found = versions()
    assert {"Qt", "PySide6-Essentials", "pyqtgraph", "torch", "transformers"} <= set(found)


def test_a_single_run_shows_its_speedup_from_a_measured_autoregressive_reference(
    make_window, qtbot
):
    window = make_window()
    window.generate()
    wait_idle(qtbot, window)
    run, reference = (s for s in window.engine.summaries)
    expected = run.tokens_per_second / reference.tokens_per_second
    line = window.summary.text().splitlines()[-1]
    assert line.startswith(f"×{expected:.2f} vs autoregressive (95% interval ")
    assert "reference measured just now, after the answer" in line
    low, high = (float(x) for x in line.split("interval ")[1].split(" ")[0].split("–"))
    assert low < expected < high  # the ratio shown lies inside its interval
    assert "Classic draft (reference)" not in window.plots.series
    assert "Autoregressive (reference)" in window.plots.series  # drawn beside the run
    assert len(window.token_view.tokens) == len(run.token_ids)  # the reference is not shown


def test_an_autoregressive_run_is_its_own_reference(make_window, qtbot):
    window = make_window()
    window.decoding.select(window.decoding.method, "ar")
    window.generate()
    wait_idle(qtbot, window)
    assert [r.method for r in window.engine.requests] == ["ar"]
    assert "this run is the autoregressive reference" in window.summary.text()


def test_stop_during_the_reference_ends_it_and_shows_no_speedup(make_window, qtbot):
    engine = FakeEngine(steps=40, delay=0.02)
    window = make_window(engine)
    window.generate()
    qtbot.waitUntil(lambda: len(engine.requests) == 2 and engine.produced >= 2, timeout=10000)
    window.stop()
    wait_idle(qtbot, window)
    assert engine.summaries[-1].method == "ar" and engine.summaries[-1].stop_reason == "stopped"
    assert "×" not in window.summary.text().splitlines()[-1]
    assert "cancelled its autoregressive reference" in window.summary.text()
    assert "τ" in window.summary.text()  # the run's own summary stays


def test_a_new_user_starts_on_the_fastest_lossless_method_and_is_told_why(make_window):
    window = make_window(fresh=True)
    assert window.decoding.method_name() == "eagle2-lookup"
    assert "fastest lossless" in window.summary.text()
    assert window.compare.chosen() == ["eagle", "eagle2", "eagle2-lookup"]


def test_saved_settings_win_over_the_first_run_choice(make_window):
    window = make_window()  # settings saved with Classic draft
    assert window.decoding.method_name() == "classic"
    assert window.loader.first_choice_reason == ""


def test_a_dead_engine_offers_a_restart_that_reloads_the_models_and_keeps_the_prompt(
    make_window, qtbot
):
    from PySide6.QtWidgets import QMessageBox

    from app.process_engine import ENDED, EngineProcessError

    engine = FakeEngine()
    window = make_window(engine)
    qtbot.waitUntil(lambda: window.ready(), timeout=5000)
    window.prompt.set_text("keep me")
    loads = len(engine.loads)
    _generate_failing(
        qtbot, window, engine, EngineProcessError(f"{ENDED} (exit code -9); press Restart engine")
    )
    qtbot.waitUntil(lambda: window.error_box is not None and window.error_box.isVisible())
    restart = next(b for b in window.error_box.buttons() if b.text() == "Restart engine")
    assert window.error_box.buttonRole(restart) == QMessageBox.ButtonRole.AcceptRole
    restart.click()
    qtbot.waitUntil(lambda: len(engine.loads) == loads + 1, timeout=5000)
    qtbot.waitUntil(window.ready, timeout=5000)  # the new engine's model is in place
    assert window.prompt.text() == "keep me"
    window.generate()  # and it runs again
    wait_idle(qtbot, window)
    assert window.token_view.tokens


def test_after_the_engine_died_nothing_starts_and_restart_keeps_every_choice(make_window, qtbot):
    from app.process_engine import ENDED, EngineProcessError

    engine = FakeEngine()
    window = make_window(engine, fresh=True)  # a new user: the first method was chosen for them
    decoding, compare = window.decoding, window.compare
    decoding.select(decoding.method, "classic")
    decoding.select(decoding.policy, "threshold")
    decoding.params["tau"].setValue(0.42)
    compare.checks["eagle2"].setChecked(False)
    chosen = (decoding.values(), compare.chosen())
    _generate_failing(
        qtbot, window, engine, EngineProcessError(f"{ENDED} (exit code -9); press Restart engine")
    )
    assert window.session.target is None and not window.ready()  # its model went with it
    assert window.status.state.text() == "no model" and window.status.model.text() == "model: —"
    assert "the engine process ended" in window.models.message.text()
    assert not window.actions.generate.isEnabled()
    restart = next(b for b in window.error_box.buttons() if b.text() == "Restart engine")
    restart.click()
    qtbot.waitUntil(window.ready, timeout=5000)
    assert (decoding.values(), compare.chosen()) == chosen
    assert decoding.params["tau"].value() == pytest.approx(0.42)


def test_a_run_says_it_is_prefilling_before_its_first_token(make_window, qtbot, monkeypatch):
    engine = FakeEngine(steps=3, delay=0.3)
    window = make_window(engine)
    qtbot.waitUntil(lambda: window.ready(), timeout=5000)
    seen = []
    shown = window.status.set_state
    monkeypatch.setattr(window.status, "set_state", lambda text: (seen.append(text), shown(text)))
    window.generate()
    wait_idle(qtbot, window)
    starting = next(i for i, text in enumerate(seen) if text.startswith("starting "))
    prefill = next(i for i, text in enumerate(seen) if "prefilling 5 prompt tokens" in text)
    running = next(i for i, text in enumerate(seen) if text.startswith("running "))
    assert starting < prefill < running


def test_each_run_is_drawn_only_by_the_tab_that_asked_for_it(make_window, qtbot):
    window = make_window()
    window.show_chat()
    window.prompt.set_text("a question")
    window.generate()  # a chat turn and its reference
    wait_idle(qtbot, window)
    assert len(window.chat_view.turns) == 1 and window.chat_view.turns[0].reply.tokens
    assert window.token_view.tokens == [] and window.summary.text() == ""
    assert window.compare.columns.columns == {}

    window.tabs.setCurrentWidget(window.output)
    window.prompt.set_text("a prompt")
    window.generate()  # a single run and its reference
    wait_idle(qtbot, window)
    assert window.token_view.tokens and "vs autoregressive" in window.summary.text()
    assert len(window.chat_view.turns) == 1 and window.compare.columns.columns == {}
    assert window.chat.chat.turns[0].reply  # the chat kept its answer, untouched


def test_a_setting_changed_during_a_run_says_it_applies_to_the_next_run(make_window, qtbot):
    engine = FakeEngine(steps=100_000, delay=0.02)
    window = make_window(engine)
    decoding = window.decoding
    decoding.k.setValue(5)  # nothing runs: the next run takes it, no word needed
    assert "next run" not in window.status.currentMessage()
    window.generate()
    qtbot.waitUntil(lambda: engine.produced >= 2, timeout=5000)
    decoding.k.setValue(6)
    assert window.status.currentMessage().startswith("draft length k 6 applies to the next run")
    decoding.select(decoding.method, "eagle")
    assert window.status.currentMessage().startswith("method EAGLE applies to the next run")
    decoding.temperature.setValue(0.7)
    assert window.status.currentMessage().startswith("temperature 0.7 applies to the next run")
    decoding.select(decoding.policy, "threshold")
    assert window.status.currentMessage().startswith("policy threshold (lossy) applies to the")
    decoding.params["tau"].setValue(0.45)
    assert window.status.currentMessage() == (
        "policy parameter tau 0.45 applies to the next run; the run in progress keeps the "
        "settings it started with"
    )
    qtbot.keyClick(window, Qt.Key.Key_Escape)
    wait_idle(qtbot, window)
    running = engine.requests[0]  # the run in progress kept what it started with
    assert (running.method, running.config.k, running.config.temperature) == ("classic", 5, 0.0)

    engine.steps = 3
    window.generate()
    wait_idle(qtbot, window)
    following = engine.requests[1]
    assert (following.method, following.config.k, following.config.temperature) == (
        "eagle",
        6,
        0.7,
    )
    assert following.config.policy_params == {"tau": 0.45}
    decoding.params["tau"].setValue(0.2)  # nothing runs: no word
    assert "tau 0.2" not in window.status.currentMessage()


def test_restart_engine_pressed_while_work_still_ends_starts_once_it_has_ended(make_window, qtbot):
    engine = FakeEngine()
    window = make_window(engine)
    loads = len(engine.loads)
    engine.measure.gate.clear()  # the sweep waits inside its first measurement
    window.sweep.view.k_values.setText("1")
    window.sweep.view.temperatures.setText("0")
    assert window.sweep.run_sweep()
    window.loader.restart_engine()
    qtbot.wait(100)
    assert len(engine.loads) == loads  # not while the sweep holds the engine
    engine.measure.gate.set()
    qtbot.waitUntil(lambda: len(engine.loads) == loads + 1, timeout=5000)
    qtbot.waitUntil(window.ready, timeout=5000)


def test_a_chat_turn_that_fails_gives_its_message_back_to_the_prompt_box(make_window, qtbot):
    engine = FakeEngine()
    window = make_window(engine)
    window.show_chat()
    window.prompt.set_text("hello there")
    missing = SpecdecError("the head 'mine' was not found; choose another in Models")
    _generate_failing(qtbot, window, engine, missing)
    assert window.last_error.startswith("the head 'mine' was not found")
    assert window.prompt.text() == "hello there"  # nothing typed is lost
    assert window.chat.chat.turns == [] and window.chat_view.turns == []
    window.generate()  # sent again, answered
    wait_idle(qtbot, window)
    assert window.chat.chat.turns[0].reply and window.prompt.text() == ""


def test_a_compare_ends_when_the_engine_dies_and_runs_nothing_more(make_window, qtbot):
    from app.process_engine import ENDED, EngineProcessError

    engine = FakeEngine()
    window = make_window(engine)
    window.compare.set_selected(["classic", "eagle"])
    engine.fail_methods["ar"] = EngineProcessError(f"{ENDED} (exit code -9); press Restart engine")
    window.run_compare()
    wait_idle(qtbot, window)
    assert [r.method for r in engine.requests] == ["ar"]  # not classic, not eagle
    assert ENDED in window.last_error and not window.ready()
