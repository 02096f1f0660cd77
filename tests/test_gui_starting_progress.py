"""Before a run's first token the state line says what the engine is doing, counting the
seconds: loading the method's head or draft (the engine's own progress report), then timing
forward passes when an auto-sized tree method sizes its tree, then prefilling the prompt."""

from __future__ import annotations

import json
import threading

from tests.gui_fake import FakeEngine
from tests.gui_window import make_window_fixture, wait_idle  # noqa: F401 (a fixture)


class LoadingEngine(FakeEngine):
    """Reports loading the method's extra before the first event, each phase held by a gate."""

    def __init__(self) -> None:
        super().__init__(steps=3)
        self.loaded = threading.Event()  # lets the load finish
        self.sized = threading.Event()  # lets the run go on to its prefill

    def events(self, request, stop, progress):
        if request.method != "ar":
            progress("loading head 'embedded'", 0.0)
            self.loaded.wait(5)
            progress("loaded head 'embedded'", 1.0)
            self.sized.wait(5)
        yield from super().events(request, stop, progress)


def _window(make_window, tmp_path, method: str):
    """A window on a `LoadingEngine` with `method` chosen and a prompt typed."""
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"method": method, "compare_methods": [method]}))
    engine = LoadingEngine()
    window = make_window(engine, settings_file=settings)
    window.prompt.set_text("Tell me a story.")
    return window, engine


def _state(window) -> str:
    return window.status.state.text()


def _wait_for_state(qtbot, window, beginning: str) -> None:
    qtbot.waitUntil(lambda: _state(window).startswith(beginning))


def test_a_first_generate_names_the_head_loading_then_the_tree_timing(make_window, qtbot, tmp_path):
    window, engine = _window(make_window, tmp_path, "eagle2")
    window.generate()
    _wait_for_state(qtbot, window, "EAGLE-2: loading head 'embedded'…")
    assert _state(window).endswith(" s")  # counting the seconds
    engine.loaded.set()
    _wait_for_state(qtbot, window, "EAGLE-2: timing forward passes to size its tree…")
    engine.sized.set()
    wait_idle(qtbot, window)
    assert "timing forward passes" not in _state(window)


def test_a_chain_method_starts_again_once_its_draft_is_loaded(make_window, qtbot, tmp_path):
    window, engine = _window(make_window, tmp_path, "classic")
    window.generate()
    _wait_for_state(qtbot, window, "Classic draft: loading head")
    engine.loaded.set()
    _wait_for_state(qtbot, window, "starting Classic draft…")
    engine.sized.set()
    wait_idle(qtbot, window)


def test_compare_names_each_methods_loading(make_window, qtbot, tmp_path):
    window, engine = _window(make_window, tmp_path, "eagle2")
    window.run_compare()
    _wait_for_state(qtbot, window, "EAGLE-2: loading head 'embedded'…")
    engine.loaded.set()
    engine.sized.set()
    wait_idle(qtbot, window)
    assert not _state(window).startswith("EAGLE-2: loading")
