"""File ▸ Export to server… writes the EAGLE head for the chosen engine and shows the command
that serves the folder; what cannot be written is one line, and nothing is lost.

The writer here does at once, in this process, what the engine process does for the window
(whose process never imports torch) in a worker: `export_head`, then `serve_command` on the
folder, and hands back the command or the error's line."""

from __future__ import annotations

import json
import shlex
from dataclasses import replace
from pathlib import Path

import pytest
from safetensors import safe_open

from app.widgets.server_export_dialog import HeadDone, HeadExportSource, ServerExportDialog
from specdec_core.config import DecodeConfig
from specdec_core.eagle.formats import save_head
from specdec_core.errors import SpecdecError
from specdec_core.head_export import export_head
from specdec_core.serve import serve_command
from tests.eagle_tiny import tiny_head
from tests.tiny import tiny_loaded

FIXTURE_NAMES = {  # ../fixtures/eagle-heads/notes/ENGINE_LOADERS.md, "Export recipes"
    "sglang": {"config.json", "model.safetensors", "hot_ids.pt"},  # EAGLE-1, its token map
    "vllm": {"config.json", "model.safetensors"},  # EAGLE-3
}
CONFIG = DecodeConfig(k=3)


@pytest.fixture(scope="module")
def target():
    return tiny_loaded(seed=7, layers=4)  # 4 layers: an EAGLE-3 head reads three of them


def saved_head(target, directory: Path, kind: str = "eagle1") -> str:
    """A tiny head as heads trained here are saved: with an fc bias, a 12-token vocabulary."""
    return str(save_head(tiny_head(target, kind, draft_vocab=12), directory))


def writer(head: str, calls: list | None = None):
    def write(engine: str, folder: Path, done: HeadDone) -> None:
        if calls is not None:
            calls.append((engine, folder))
        try:
            written = export_head(engine, head, folder)
        except SpecdecError as error:
            done(str(error))
            return
        command = serve_command(engine, "eagle", CONFIG, "org/target", str(written.directory))
        done(replace(command, notes=[*written.notes, *command.notes]))

    return write


def dialog_for(qtbot, head: HeadExportSource | str) -> ServerExportDialog:
    commands = {
        "vllm": serve_command("vllm", "eagle", CONFIG, "org/target", "org/head"),
        "sglang": serve_command("sglang", "eagle", CONFIG, "org/target", "org/head"),
    }
    dialog = ServerExportDialog(commands, head=head)
    qtbot.addWidget(dialog)
    return dialog


def write(dialog: ServerExportDialog, engine: str, folder: Path | str) -> bool:
    """Write Head for `engine` into `folder`; True when the command serving it is shown."""
    dialog.head_engine.setCurrentIndex(dialog.head_engine.findData(engine))
    dialog.head_folder.setText(str(folder))
    dialog.write_head()
    return dialog.head_status.text().startswith("wrote ")


def test_writing_the_head_for_sglang_gives_the_fixture_files_and_the_command(
    qtbot, target, tmp_path
):
    head = saved_head(target, tmp_path / "head")
    dialog = dialog_for(qtbot, HeadExportSource(head, writer(head)))
    folder = tmp_path / "for sglang"
    dialog.write_button.click()  # no folder yet: a line, nothing written
    assert "choose a folder" in dialog.head_status.text()
    assert write(dialog, "sglang", folder)
    assert {p.name for p in folder.iterdir()} == FIXTURE_NAMES["sglang"]
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle"]
    with safe_open(str(folder / "model.safetensors"), "np") as weights:
        names = set(weights.keys())
    assert "fc.bias" in names and "d2t" not in names
    shown = dialog.texts["sglang"].toPlainText()
    words = shlex.split(shown)
    assert words[words.index("--speculative-draft-model-path") + 1] == str(folder)
    assert words[words.index("--speculative-token-map") + 1] == str(folder / "hot_ids.pt")
    assert dialog.commands["sglang"].command == shown  # Copy and Save take the new command
    status = dialog.head_status.text()
    assert "config.json, hot_ids.pt, model.safetensors" in status and str(folder) in status
    assert "org/head" in dialog.texts["vllm"].toPlainText()  # the other engine's stays


def test_an_eagle3_head_is_written_for_vllm_without_a_token_map(qtbot, target, tmp_path):
    head = saved_head(target, tmp_path / "head3", kind="eagle3")
    dialog = dialog_for(qtbot, HeadExportSource(head, writer(head)))
    folder = tmp_path / "for-vllm"
    assert write(dialog, "vllm", folder)
    assert {p.name for p in folder.iterdir()} == FIXTURE_NAMES["vllm"]
    payload = shlex.split(dialog.texts["vllm"].toPlainText())
    spec = json.loads(payload[payload.index("--speculative-config") + 1])
    assert spec == {"method": "eagle3", "num_speculative_tokens": 3, "model": str(folder)}


def test_a_head_vllm_cannot_carry_is_one_line_naming_what_and_the_training_option(
    qtbot, target, tmp_path
):
    head = saved_head(target, tmp_path / "head")
    dialog = dialog_for(qtbot, HeadExportSource(head, writer(head)))
    before = dialog.texts["vllm"].toPlainText()
    assert not write(dialog, "vllm", tmp_path / "for-vllm")
    line = dialog.head_status.text()
    assert "\n" not in line
    assert "an fc bias and a draft vocabulary of 12 tokens" in line
    assert "--arch eagle3" in line
    assert not (tmp_path / "for-vllm").exists()
    assert dialog.texts["vllm"].toPlainText() == before  # the command shown stays
    assert dialog.head_folder.text() == str(tmp_path / "for-vllm")  # so does the folder


def test_a_folder_that_cannot_take_the_head_is_one_line_and_its_files_stay(qtbot, target, tmp_path):
    head = saved_head(target, tmp_path / "head")
    calls: list = []
    dialog = dialog_for(qtbot, HeadExportSource(head, writer(head, calls)))
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine")
    assert not write(dialog, "sglang", a_file)
    assert (
        dialog.head_status.text()
        == f"{a_file} is a file; choose a new or empty folder for the head"
    )
    assert not write(dialog, "sglang", a_file / "head")
    assert "is a file" in dialog.head_status.text()
    assert calls == []  # refused before anything is asked of the engine
    occupied = tmp_path / "checkpoint"
    occupied.mkdir()
    (occupied / "pytorch_model.bin").write_text("another model")
    assert not write(dialog, "sglang", occupied)
    assert "already holds pytorch_model.bin" in dialog.head_status.text()
    assert [p.name for p in occupied.iterdir()] == ["pytorch_model.bin"]
    assert a_file.read_text() == "mine"


def test_a_folder_this_user_cannot_write_is_one_line(qtbot, tmp_path, monkeypatch):
    calls: list = []
    dialog = dialog_for(qtbot, HeadExportSource("embedded", writer("embedded", calls)))
    monkeypatch.setattr("os.access", lambda path, mode: False)  # a folder of another user
    assert not write(dialog, "sglang", tmp_path / "new" / "head")
    assert dialog.head_status.text() == (
        f"cannot write into {tmp_path} (no permission); choose a folder you can write to"
    )
    assert calls == []


def test_writing_runs_elsewhere_and_the_dialog_waits_for_its_answer(qtbot, tmp_path):
    pending: list = []
    dialog = dialog_for(qtbot, HeadExportSource("embedded", lambda *call: pending.append(call)))
    before = dialog.texts["sglang"].toPlainText()
    assert dialog.write_head() is False  # no folder yet
    dialog.head_engine.setCurrentIndex(dialog.head_engine.findData("sglang"))
    dialog.head_folder.setText(str(tmp_path / "head"))
    assert dialog.write_head()
    assert len(pending) == 1 and pending[0][:2] == ("sglang", tmp_path / "head")
    assert not dialog.write_button.isEnabled()  # one writing at a time
    assert dialog.head_status.text() == f"writing the head for SGLang into {tmp_path / 'head'}…"
    assert not dialog.write_head()
    pending[0][2]("the engine process ended unexpectedly (exit code -9); start it again\nTrace")
    assert dialog.write_button.isEnabled()
    assert dialog.head_status.text() == (
        "the engine process ended unexpectedly (exit code -9); start it again"
    )
    assert dialog.texts["sglang"].toPlainText() == before


def test_a_method_without_a_head_says_so_and_offers_no_writing(qtbot):
    reason = "N-gram lookup drafts without an EAGLE head: choose an EAGLE method to export one"
    dialog = dialog_for(qtbot, reason)
    assert dialog.head_status.text() == reason
    assert not dialog.write_button.isEnabled() and not dialog.head_folder.isEnabled()
    assert not dialog.write_head()
