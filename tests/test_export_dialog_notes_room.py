"""Export to server…: the notes take the height the rest of the dialog leaves (a taller dialog
gives all of it to them), each command's box is as tall as its wrapped lines, and the dialog
opens inside its screen."""

from __future__ import annotations

from PySide6.QtWidgets import QPlainTextEdit

from app.server_controller import export_commands
from app.widgets.server_export_dialog import (
    COMMAND_LINES,
    HeadExportSource,
    ServerExportDialog,
)
from specdec_core.decoding.config import DecodeConfig
from specdec_core.serving.serve import ServeCommand

TARGET = "HuggingFaceTB/SmolLM2-135M-Instruct"


def _opened(qtbot, commands, head=None) -> ServerExportDialog:
    dialog = ServerExportDialog(commands, head=head, config=DecodeConfig())
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    qtbot.wait(20)
    return dialog


def _shown_whole(box: QPlainTextEdit) -> bool:
    last = box.document().lastBlock()
    bottom = box.blockBoundingGeometry(last).translated(box.contentOffset()).bottom()
    return box.verticalScrollBar().maximum() == 0 and bottom <= box.viewport().height()


def test_the_notes_take_the_spare_height_and_the_commands_only_their_lines(qtbot):
    # a head both engines serve as it stands (the bundled one waits to be written for them)
    commands = export_commands(
        "eagle2-lookup", DecodeConfig(), TARGET, {"head": "org/head"}, "auto"
    )
    head = HeadExportSource("org/head", lambda *call: None)
    dialog = _opened(qtbot, commands, head)
    room = dialog.screen().availableGeometry()
    assert dialog.width() <= room.width() and dialog.height() <= room.height()
    notes = dialog.notes["sglang"]
    assert notes.isVisible() and notes.toPlainText().count("•") >= 4
    for engine, text in dialog.texts.items():  # the whole command, and no more room than it
        assert _shown_whole(text), engine
        lines = text.wrapped_lines(text.width())
        assert text.height() <= (lines + 1) * text.fontMetrics().lineSpacing() + 16, engine
    before = {name: box.height() for name, box in dialog.texts.items()}
    notes_before = sum(box.height() for box in dialog.notes.values())
    dialog.resize(dialog.width(), dialog.height() - 120)
    qtbot.wait(20)
    taller = notes_before - sum(box.height() for box in dialog.notes.values())
    assert taller >= 100  # the notes gave up (nearly) all the height taken away
    assert {name: box.height() for name, box in dialog.texts.items()} == before


def test_a_command_longer_than_its_box_scrolls_and_the_box_stops_growing(qtbot):
    long = ServeCommand("vllm", "eagle", ("vllm", "serve", *["--flag value"] * 200), ["a note"])
    dialog = _opened(qtbot, {"vllm": long})
    text = dialog.texts["vllm"]
    assert text.wrapped_lines(text.width()) > COMMAND_LINES
    assert text.height() <= (COMMAND_LINES + 1) * text.fontMetrics().lineSpacing() + 16
    assert text.verticalScrollBar().maximum() > 0  # the rest scrolls
