"""Shared pytest fixtures for the window tests: a MainWindow on a fake engine."""

from __future__ import annotations

import json

import pytest
from PySide6.QtCore import QRect

from app import screen
from app.main_window import MainWindow
from tests.gui_fake import FakeEngine


@pytest.fixture(name="make_window")
def make_window_fixture(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("SPECDEC_DATA_DIR", str(tmp_path / "data"))
    # a 1920×1080 desktop (the offscreen platform's screen is 800×800); tests of other sizes
    # set their own
    monkeypatch.setattr(screen, "available", lambda widget: QRect(0, 0, 1920, 1080))
    windows: list[MainWindow] = []

    def make(engine: FakeEngine | None = None, settings_file=None, fresh=False) -> MainWindow:
        """A window on the fake engine. Unless `fresh` (a new user: no settings file), it
        starts from saved settings choosing Classic draft, alone in the Compare set."""
        path = settings_file or tmp_path / "config" / "settings.json"
        if not fresh and not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"method": "classic", "compare_methods": ["classic"]}))
        window = MainWindow(engine=engine or FakeEngine(), settings_file=path)
        qtbot.addWidget(window)
        window.show()
        qtbot.waitUntil(window.ready, timeout=5000)
        windows.append(window)
        return window

    yield make
    for window in windows:
        window.controller.shutdown(5000)


def wait_idle(qtbot, window: MainWindow, timeout: int = 5000) -> None:
    """Until nothing runs: no run queue, and no autoregressive reference in the background."""
    controller = window.controller
    qtbot.waitUntil(
        lambda: not controller.running and not controller.measuring_reference, timeout=timeout
    )
