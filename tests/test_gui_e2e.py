"""End to end on the embedded model: load, generate, compare (a few tokens)."""

from __future__ import annotations

import pytest

from app.engine import SpecdecEngine
from app.main_window import MainWindow


@pytest.mark.slow
def test_the_window_runs_the_embedded_model_end_to_end(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CONFIG_DIR", str(tmp_path))
    monkeypatch.setenv("SPECDEC_DATA_DIR", str(tmp_path))
    window = MainWindow(engine=SpecdecEngine(), settings_file=tmp_path / "settings.json")
    qtbot.addWidget(window)
    window.models.device.setCurrentText("cpu")
    window.models.draft.set_spec("smollm2")  # the target as its own draft: accepts everything
    window.show()
    qtbot.waitUntil(window.ready, timeout=180_000)  # imports torch, loads the target
    assert window.target is not None and window.target.spec == "embedded"
    window.decoding.max_new_tokens.setValue(6)
    window.decoding.select(window.decoding.method, "ar")
    window.prompt.set_text("Say hello.")

    window.generate()
    qtbot.waitUntil(lambda: not window.controller.running, timeout=120_000)
    assert window.last_error is None
    assert 0 < len(window.token_view.tokens) <= 6
    assert "Autoregressive: " in window.summary.text()

    window.decoding.max_new_tokens.setValue(200)  # Stop ends the run after the current step
    window.generate()
    qtbot.waitUntil(lambda: len(window.token_view.tokens) >= 2, timeout=120_000)
    window.stop()
    qtbot.waitUntil(lambda: not window.controller.running, timeout=60_000)
    assert "stopped by the user" in window.summary.text()
    assert len(window.token_view.tokens) < 20

    window.decoding.max_new_tokens.setValue(6)
    window.compare.set_selected(["classic"])
    window.run_compare()
    qtbot.waitUntil(lambda: not window.controller.running, timeout=120_000)
    assert window.last_error is None
    assert list(window.compare.columns.columns) == ["ar", "classic"]
    assert window.compare.table.item(1, 7).text() == "yes"  # greedy and lossless: same text
    window.close()
    assert window.controller.live_threads() == 0
