"""The first run's hint on the status bar is readable whole at 1280×800: it fits the room the
permanent labels leave it, or is cut with "…" and whole in the bar's tooltip, and it is fitted
again when that room shrinks (a window made narrower, a longer model name once loaded)."""

from __future__ import annotations

from PySide6.QtCore import QRect

from app import screen
from app.engine import SpecdecEngine
from tests.gui_fake import FakeEngine
from tests.gui_window import make_window_fixture  # noqa: F401 (a fixture)

SMALL = (1280, 800)


def _real_names() -> FakeEngine:
    engine = FakeEngine(steps=4)
    engine.registries = SpecdecEngine().registries  # every method, with its real label
    return engine


def _room(bar) -> int:
    """Pixels the bar draws its message in: from its left margin to the first permanent label."""
    return bar.state.x() - 2 - 6


def _readable_whole(bar) -> str:
    """The note's whole text, asserting it is shown whole or cut with its whole text on hover."""
    shown = bar.currentMessage()
    assert bar.fontMetrics().horizontalAdvance(shown) <= _room(bar)
    if shown.endswith("…"):
        assert bar.toolTip().startswith(shown[:-1])
        return bar.toolTip()
    return shown


def test_the_first_run_hint_is_whole_at_1280(make_window, qtbot, monkeypatch):
    monkeypatch.setattr(screen, "available", lambda widget: QRect(0, 0, *SMALL))
    window = make_window(_real_names(), fresh=True)
    window.resize(*SMALL)
    qtbot.wait(50)
    assert (window.width(), window.height()) == SMALL
    hint = _readable_whole(window.status)
    assert hint.startswith("selected ") and "press Compare" in hint


def test_the_hint_is_fitted_again_when_its_room_shrinks(make_window, qtbot, monkeypatch):
    window = make_window(_real_names(), fresh=True)  # opened wide: the hint fits as it is
    bar = window.status
    hint = bar.currentMessage()
    assert hint.startswith("selected ") and not hint.endswith("…")
    monkeypatch.setattr(screen, "available", lambda widget: QRect(0, 0, *SMALL))
    window.resize(*SMALL)
    bar.set_model("HuggingFaceTB/SmolLM2-1.7B-Instruct-with-a-long-local-suffix", "cpu", "bfloat16")
    bar.set_state("EAGLE-2 + prompt lookup: prefilling 1200 prompt tokens… 12 s")
    qtbot.wait(50)
    assert _readable_whole(bar) == hint
    assert bar.currentMessage().endswith("…")  # this much room cannot hold it whole


def test_a_note_that_is_replaced_takes_its_tooltip_with_it(make_window, qtbot):
    window = make_window(_real_names())
    window.state.note("x " * 400)
    assert window.status.toolTip() == "x " * 400
    window.status.showMessage("restarting the engine…", 1000)
    assert window.status.toolTip() == ""
