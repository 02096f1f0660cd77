"""File ▸ Export to server… ▸ Check with vLLM here: the check runs in the engine (the fake
here: tests/gui_fake.py), its progress is the dialog's status line and its table shows under
vLLM's box; Stop, Esc and closing the dialog stop it within a step; what cannot start is one
line."""

from __future__ import annotations

import time

from app.widgets.server_export_dialog import CHECK
from specdec_core.errors import SpecdecError
from specdec_core.serving.serving_check import ServeCheck
from tests.gui_fake import FakeEngine
from tests.gui_window import make_window_fixture, wait_idle  # noqa: F401  (fixture)

PROMPT = "Write a haiku about speculative decoding."


def open_dialog(window):
    window.models.draft.set_spec("org/draft")
    window.prompt.set_text(PROMPT)
    window.actions.export_server.trigger()
    return window.server.export_dialog


def test_the_check_shows_its_table_under_vllms_box(qtbot, make_window):
    engine = FakeEngine()
    window = make_window(engine)
    dialog = open_dialog(window)
    assert dialog.check_button.isEnabled() and dialog.check_button.text() == CHECK
    assert dialog.check()
    assert dialog.check_button.text() == "Stop check" and window.session.busy
    qtbot.waitUntil(lambda: dialog.check_result is not None, timeout=10000)
    result = dialog.check_result
    assert isinstance(result, ServeCheck)
    (request,) = engine.serve_checks
    assert request.method == window.decoding.method_name() and request.prompt == PROMPT
    assert request.specs["draft"] == "org/draft"
    assert dialog.check_table.isVisible() or not dialog.isVisible()
    assert "1/1 identical to the playground's ar" in dialog.check_table.toPlainText()
    assert dialog.check_status.text().startswith("vLLM served it: 1/1 identical")
    assert dialog.check_button.text() == CHECK
    wait_idle(qtbot, window)
    assert not window.session.busy


def test_stop_and_closing_the_dialog_stop_the_check_within_a_step(qtbot, make_window):
    engine = FakeEngine()
    engine.check_seconds = 60.0
    window = make_window(engine)
    for how in ("stop", "close"):
        dialog = open_dialog(window)
        assert dialog.check()
        qtbot.waitUntil(lambda dialog=dialog: "starting vLLM" in dialog.check_status.text())
        pressed = time.monotonic()
        if how == "stop":
            window.stop()  # the Stop button and Esc
        else:
            dialog.reject()
        qtbot.waitUntil(lambda dialog=dialog: dialog.check_result is not None, timeout=5000)
        assert time.monotonic() - pressed < 2.0
        assert "the serving check was stopped" in dialog.check_result
        # the result reaches the dialog a moment before the job's end reaches the window
        qtbot.waitUntil(lambda: not window.server.checking, timeout=2000)
        wait_idle(qtbot, window)
        assert not window.session.busy


def test_what_keeps_the_check_from_starting_is_one_line(qtbot, make_window):
    engine = FakeEngine()
    window = make_window(engine)
    dialog = open_dialog(window)
    window.prompt.set_text("   ")
    assert not dialog.check()
    assert dialog.check_status.text() == (
        "type a prompt in the window first: the check sends it to vLLM"
    )
    window.prompt.set_text(PROMPT)
    engine.fail_next = SpecdecError("no serving environment at /x/.venv-serving")
    assert dialog.check()
    qtbot.waitUntil(lambda: dialog.check_result is not None, timeout=5000)
    assert dialog.check_status.text().startswith("no serving environment at /x/.venv-serving")
    assert dialog.check_button.isEnabled() and dialog.check_button.text() == CHECK
    wait_idle(qtbot, window)
