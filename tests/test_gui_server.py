"""The Server tab polls a (fixture) vLLM server and fills its plots beside the playground's
last run; File ▸ Export to server… shows the commands and saves an executable script."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QPushButton

from specdec_core.serving.server_metrics import BASELINE, UNREACHABLE
from tests.gui_fake import FakeEngine
from tests.gui_window import make_window_fixture, wait_idle  # noqa: F401  (fixture)
from tests.serving_server import FixtureServer


@pytest.fixture(name="server")
def server_fixture():
    server = FixtureServer("vllm_metrics_1.txt")
    server.then("vllm_metrics_2.txt")
    yield server
    server.stop()


def _watch(qtbot, window, url: str) -> None:
    view = window.server.view
    view.url.setText(url)
    view.period.setValue(0.2)
    assert window.server.start()
    assert not view.start_button.isEnabled() and view.stop_button.isEnabled()


def test_server_tab_polls_and_draws_beside_the_last_run(qtbot, make_window, server):
    engine = FakeEngine()
    window = make_window(engine)
    window.generate()  # classic on the fake engine, then its autoregressive reference
    wait_idle(qtbot, window)
    classic = engine.summaries[0]
    assert window.server.view.playground is classic  # the reference run is not compared
    run = replace(classic, accepted_per_position=(9, 6, 3), drafted_per_position=(10, 10, 10))
    window.session.keep("run", run)  # a run that reports acceptance by position
    _watch(qtbot, window, server.url)
    view = window.server.view
    qtbot.waitUntil(lambda: view.trace.intervals >= 2, timeout=10000)
    times, taus = view.trace.tau
    assert taus[0] == pytest.approx(2.8)  # 1 + (2520 - 1800) / (1400 - 1000)
    assert list(view.tau_plot.line.getData()[1])[:1] == pytest.approx([2.8])
    assert view.tau_plot.level.isVisible()
    assert view.tau_plot.level.value() == pytest.approx(run.mean_accept_length)
    bars = view.positions.items
    assert set(bars) == {view.trace.label(), f"playground (classic) τ {run.mean_accept_length:.2f}"}
    server_bars = bars[view.trace.label()].opts["height"]
    assert list(server_bars) == pytest.approx([0.8, 0.6, 0.4])
    playground_bars = bars[f"playground (classic) τ {run.mean_accept_length:.2f}"].opts["height"]
    assert list(playground_bars) == pytest.approx([0.9, 0.6, 0.3])
    assert len(view.speed.accepted.getData()[1]) >= 1
    assert "playground (classic)" in view.key.text() and "vllm" in view.key.text()
    view.stop_button.click()
    qtbot.waitUntil(lambda: not window.server.running, timeout=5000)
    assert view.start_button.isEnabled()
    saved = json.loads(window.settings_file.read_text())
    assert saved["server_url"] == server.url  # remembered


def test_a_vanishing_server_is_a_status_line_and_polling_resumes(qtbot, make_window, server):
    window = make_window()
    _watch(qtbot, window, server.url)
    view = window.server.view
    qtbot.waitUntil(lambda: view.trace.intervals >= 1, timeout=10000)
    server.stop()
    qtbot.waitUntil(lambda: "unreachable" in view.status.text(), timeout=10000)
    assert "retrying every 0.2 s" in view.status.text()
    assert window.server.last_poll.state == UNREACHABLE
    assert window.error_box is None and window.last_error is None  # no dialog
    seen = view.trace.intervals
    server.start()
    qtbot.waitUntil(lambda: view.trace.intervals > seen, timeout=10000)
    assert window.server.running
    window.server.stop()
    qtbot.waitUntil(lambda: not window.server.running, timeout=5000)


def test_after_a_baseline_the_status_line_counts_down_to_the_first_numbers(
    qtbot, make_window, server
):
    window = make_window()
    view = window.server.view
    view.url.setText(server.url)
    view.period.setValue(4.0)
    assert window.server.start()
    qtbot.waitUntil(lambda: window.server.last_poll is not None, timeout=10000)
    assert window.server.last_poll.state == BASELINE
    assert view.status.text().endswith("baseline taken; first numbers in 4 s")
    qtbot.waitUntil(lambda: view.status.text().endswith("first numbers in 2 s"), timeout=5000)
    qtbot.waitUntil(lambda: view.trace.intervals >= 1, timeout=10000)
    assert "first numbers" not in view.status.text()
    window.server.stop()
    qtbot.waitUntil(lambda: not window.server.running, timeout=10000)


def test_a_bad_url_is_a_status_line(make_window):
    window = make_window()
    window.server.view.url.setText("ftp://nowhere")
    assert not window.server.start()
    assert "http" in window.server.view.status.text() and window.error_box is None


def test_export_dialog_copies_and_saves_an_executable_script(
    qtbot, make_window, tmp_path, monkeypatch
):
    window = make_window()
    window.models.draft.set_spec("org/draft")
    window.actions.export_server.trigger()
    dialog = window.server.export_dialog
    assert dialog is not None and set(dialog.commands) == {"vllm", "sglang"}
    vllm = dialog.commands["vllm"]
    assert vllm.argv[:2] == ("vllm", "serve") and "draft_model" in vllm.command
    assert "sglang.launch_server" in dialog.texts["sglang"].toPlainText()
    buttons = [b for b in dialog.findChildren(QPushButton) if b.text() == "Copy"]
    buttons[0].click()
    assert QGuiApplication.clipboard().text() == vllm.command
    target = tmp_path / "serve vllm.sh"
    monkeypatch.setattr(
        "app.widgets.server_export_dialog.QFileDialog.getSaveFileName",
        lambda *args, **kwargs: (str(target), ""),
    )
    saves = [b for b in dialog.findChildren(QPushButton) if b.text().startswith("Save as")]
    saves[0].click()
    assert os.access(target, os.X_OK)
    text = target.read_text()
    assert text.startswith("#!/usr/bin/env bash\n") and vllm.command in text
    assert "saved" in dialog.status.text()
