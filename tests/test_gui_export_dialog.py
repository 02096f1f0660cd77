"""File ▸ Export to server… offers only commands that serve what is selected: vLLM's box says
at once, before any command, that it cannot load an EAGLE-1 head with an fc bias or a reduced
vocabulary (the bundled head has both), and refuses exactly the heads the head export
refuses; SGLang's box offers no command for a head it would draft over the wrong vocabulary
as it stands (the bundled head) until the head is written for it; vLLM's
`num_speculative_tokens` is never null; the notes scroll, none cut off."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import torch

from app.server_controller import export_commands
from app.widgets.server_export_dialog import (
    NO_DRAFT_LENGTH,
    NOTES_LINES,
    HeadExportSource,
    ServerExportDialog,
    sglang_unwritten,
    vllm_refusal,
)
from specdec_core.decoding.config import DecodeConfig
from specdec_core.errors import SpecdecError
from specdec_core.heads.eagle.formats import save_head
from specdec_core.serving.head_export import export_head
from specdec_core.serving.serve import ServeCommand, serve_command
from tests.eagle_tiny import tiny_head
from tests.gui_window import make_window_fixture  # noqa: F401  (fixture)
from tests.tiny import tiny_loaded

BUNDLED_REFUSAL = "this head has an fc bias and a draft vocabulary of 8192 tokens"
BUNDLED_UNWRITTEN = "write the head for SGLang below first (Write head)"


def dialog_for(qtbot, method, head, config=None, calls=None) -> ServerExportDialog:
    """The dialog for `method` drafting with `head` (a spec), as the window opens it."""
    commands = export_commands(method, config or DecodeConfig(), "embedded", {"head": head}, "auto")
    written = calls if calls is not None else []
    source = HeadExportSource(head, lambda *call: written.append(call))
    dialog = ServerExportDialog(commands, head=source, config=config)
    qtbot.addWidget(dialog)
    return dialog


def vllm_spec(dialog: ServerExportDialog) -> dict:
    words = shlex.split(dialog.texts["vllm"].toPlainText())
    return json.loads(words[words.index("--speculative-config") + 1])


def buttons_enabled(dialog: ServerExportDialog, engine: str) -> bool:
    return all(button.isEnabled() for button in dialog.buttons[engine])


@pytest.mark.parametrize("method", ["eagle", "eagle2"])
def test_vllm_says_at_once_that_it_cannot_load_the_bundled_head(qtbot, method, tmp_path):
    calls: list = []
    dialog = dialog_for(qtbot, method, "embedded", DecodeConfig(k=3), calls)
    shown = dialog.texts["vllm"].toPlainText()
    assert shown.startswith("vLLM cannot serve this EAGLE-1 head as it stands")
    assert BUNDLED_REFUSAL in shown and "eagle3" in shown and "vllm serve" not in shown
    assert not buttons_enabled(dialog, "vllm")  # nothing to copy or save
    assert dialog.commands["vllm"] == shown
    # SGLang takes it once written for it: until then no command that would draft over the
    # full vocabulary, only what to do
    sglang = dialog.texts["sglang"].toPlainText()
    assert sglang.startswith(BUNDLED_UNWRITTEN) and "8192 tokens" in sglang
    assert "launch_server" not in sglang and not buttons_enabled(dialog, "sglang")
    # Write head starts on the engine that loads it; choosing vLLM says why not, at once
    assert dialog.head_engine.currentData() == "sglang" and dialog.head_status.text() == ""
    dialog.head_engine.setCurrentIndex(dialog.head_engine.findData("vllm"))
    assert BUNDLED_REFUSAL in dialog.head_status.text()
    dialog.head_folder.setText(str(tmp_path / "head"))
    assert not dialog.write_head() and calls == []  # nothing is asked of the engine
    assert BUNDLED_REFUSAL in dialog.head_status.text()
    dialog.head_engine.setCurrentIndex(dialog.head_engine.findData("sglang"))
    assert dialog.head_status.text() == ""
    assert dialog.write_head() and calls[0][:2] == ("sglang", tmp_path / "head")
    written = serve_command("sglang", method, DecodeConfig(k=3), "embedded", str(tmp_path))
    dialog.head_done("sglang", tmp_path / "head", written)
    assert "launch_server" in dialog.texts["sglang"].toPlainText()
    assert buttons_enabled(dialog, "sglang")  # the command serving the written head


def test_the_window_opens_the_export_with_vllms_refusal_of_the_bundled_head(make_window):
    window = make_window()
    window.decoding.select(window.decoding.method, "eagle2")
    window.actions.export_server.trigger()
    dialog = window.server.export_dialog
    assert BUNDLED_REFUSAL in dialog.texts["vllm"].toPlainText()
    assert dialog.texts["sglang"].toPlainText().startswith(BUNDLED_UNWRITTEN)
    assert all("null" not in text.toPlainText() for text in dialog.texts.values())


# -- the refusal is the head export's rule, read without torch --------------------------------
@pytest.fixture(scope="module")
def target():
    return tiny_loaded(seed=7, layers=4)


HEADS = {  # name: (kind, draft vocabulary, fc bias, dtype) and what vLLM's refusal names
    "bias and vocabulary": (("eagle1", 12, "random", torch.float32), "an fc bias and a draft"),
    "bias": (("eagle1", 0, "random", torch.float16), "has an fc bias;"),
    "vocabulary, zero bias": (("eagle1", 12, "zero", torch.float32), "has a draft vocabulary"),
    "zero bias in bfloat16": (("eagle1", 0, "zero", torch.bfloat16), ""),
    "bias in bfloat16": (("eagle1", 0, "random", torch.bfloat16), "has an fc bias;"),
    "eagle3": (("eagle3", 12, "random", torch.float32), ""),
}


@pytest.mark.parametrize("name", list(HEADS))
def test_vllm_is_refused_exactly_the_heads_the_head_export_refuses(target, tmp_path, name):
    (kind, vocab, bias, dtype), named = HEADS[name]
    head = tiny_head(target, kind, draft_vocab=vocab)
    if bias == "zero":
        with torch.no_grad():
            head.fc.bias.zero_()
            head.fc.bias[0] = -0.0  # a negative zero is zero too
    folder = save_head(head.to(dtype), tmp_path / "head")
    refusal = vllm_refusal(Path(folder))
    try:
        export_head("vllm", str(folder), tmp_path / "out")
        exported = ""
    except SpecdecError as error:
        exported = str(error)
    assert bool(refusal) == bool(exported) == bool(named)
    assert named in refusal and "\n" not in refusal
    if exported:  # the same things named as the export names them
        assert refusal.split("this head has ")[1].split(";")[0] in exported


@pytest.mark.parametrize("vocab", [12, 0], ids=["reduced vocabulary", "full vocabulary"])
def test_sglang_waits_for_a_head_written_for_it_exactly_when_it_has_a_reduced_vocabulary(
    target, tmp_path, vocab
):
    head = tiny_head(target, "eagle1", draft_vocab=vocab)
    folder = Path(save_head(head, tmp_path / "head"))
    assert bool(sglang_unwritten(folder)) == bool(vocab)
    export_head("sglang", str(folder), tmp_path / "for-sglang")
    assert sglang_unwritten(tmp_path / "for-sglang") == ""  # written: its token map beside it


# -- never null ----------------------------------------------------------------------------
def test_an_auto_tree_gets_the_decoding_panels_k_as_vllms_draft_length(qtbot):
    dialog = dialog_for(qtbot, "eagle2", "org/head", DecodeConfig(k=5))  # tree size auto
    assert vllm_spec(dialog)["num_speculative_tokens"] == 5
    assert "null" not in dialog.texts["vllm"].toPlainText()
    command = dialog.commands["vllm"]
    assert command.command == dialog.texts["vllm"].toPlainText()  # Copy and Save take it
    assert command.notes[0].startswith("num_speculative_tokens is 5, the Decoding panel's k")
    assert "num_speculative_tokens is 5" in dialog.notes["vllm"].toPlainText()
    tuned = DecodeConfig(k=5, tree_depth=3, tree_topk=4, tree_tokens=12)
    assert vllm_spec(dialog_for(qtbot, "eagle2", "org/head", tuned))["num_speculative_tokens"] == 3
    chain = dialog_for(qtbot, "eagle", "org/head", DecodeConfig(k=2))
    assert vllm_spec(chain)["num_speculative_tokens"] == 2


def test_without_the_settings_an_auto_tree_says_what_to_set_instead_of_null(qtbot):
    commands = export_commands("eagle2", DecodeConfig(), "embedded", {"head": "org/head"}, "auto")
    assert '"num_speculative_tokens": null' in commands["vllm"].command  # as built
    dialog = ServerExportDialog(commands, head=HeadExportSource("org/head", lambda *call: None))
    qtbot.addWidget(dialog)
    assert dialog.texts["vllm"].toPlainText() == NO_DRAFT_LENGTH
    assert not buttons_enabled(dialog, "vllm")


def test_a_command_the_head_writer_hands_back_is_filled_too(qtbot, tmp_path):
    config = DecodeConfig(k=4)
    dialog = dialog_for(qtbot, "eagle2", "org/head", config)
    written = serve_command("vllm", "eagle2", config, "org/target", str(tmp_path))
    assert '"num_speculative_tokens": null' in written.command
    dialog.head_done("vllm", tmp_path, written)
    assert vllm_spec(dialog)["num_speculative_tokens"] == 4


# -- the notes scroll ----------------------------------------------------------------------
def test_the_notes_scroll_and_none_is_cut_off(qtbot):
    notes = [f"note {n}: " + "a long line that wraps " * 6 for n in range(30)]
    command = ServeCommand("vllm", "eagle", ("vllm", "serve", "org/target"), notes)
    dialog = ServerExportDialog({"vllm": command, "sglang": "cannot serve this setting"})
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    area = dialog.notes["vllm"]
    assert area.isVisible() and area.height() >= NOTES_LINES * area.fontMetrics().lineSpacing()
    assert not dialog.notes["sglang"].isVisible()  # no notes: no empty area
    bar = area.verticalScrollBar()
    assert bar.maximum() > 0  # more than fits: it scrolls
    first = area.document().firstBlock()
    assert area.blockBoundingGeometry(first).translated(area.contentOffset()).top() >= 0
    bar.setValue(bar.maximum())
    last = area.document().lastBlock()
    assert last.text().startswith("• note 29")
    bottom = area.blockBoundingGeometry(last).translated(area.contentOffset()).bottom()
    assert bottom <= area.viewport().height() + 1  # the last note, whole, at the end
