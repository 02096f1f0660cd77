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
from specdec_core.decoding.config import DecodeConfig
from specdec_core.errors import SpecdecError
from specdec_core.heads.eagle.formats import save_head
from specdec_core.serving.head_export import export_head
from specdec_core.serving.serve import serve_command
from tests.eagle_tiny import tiny_head
from tests.gui_window import make_window_fixture  # noqa: F401  (fixture)
from tests.tiny import tiny_loaded

FIXTURE_NAMES = {  # ../fixtures/eagle-heads/notes/ENGINE_LOADERS.md, "Export recipes"
    "sglang": {"config.json", "model.safetensors", "hot_ids.pt"},  # EAGLE-1, its token map
    "vllm": {"config.json", "model.safetensors"},  # EAGLE-3
}
CONFIG = DecodeConfig(k=3)
NO_HEAD = "N-gram lookup drafts without an EAGLE head: choose an EAGLE method to export one"


@pytest.fixture(scope="module")
def target():
    return tiny_loaded(seed=7, layers=4)  # 4 layers: an EAGLE-3 head reads three of them


def saved_head(target, directory: Path, kind: str = "eagle1") -> str:
    """A tiny head as heads trained here are saved: with an fc bias, a 12-token vocabulary."""
    return str(save_head(tiny_head(target, kind, draft_vocab=12), directory))


def file_in_the_way(tmp_path: Path) -> Path:
    """`tmp_path/notes.txt`, a file that says "mine": no head folder can be written there or
    under it."""
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine")
    return a_file


def assert_refused_without_a_head(engine, request) -> None:
    """`engine` refuses to export a head for `request`, whose method drafts without one, in
    the one line `NO_HEAD`."""
    with pytest.raises(SpecdecError) as refused:
        engine.export_head(request)
    assert str(refused.value) == NO_HEAD


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
    assert "vLLM cannot serve this EAGLE-1 head" in dialog.texts["vllm"].toPlainText()


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
    a_file = file_in_the_way(tmp_path)
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
    dialog = dialog_for(qtbot, NO_HEAD)
    assert dialog.head_status.text() == NO_HEAD
    assert not dialog.write_button.isEnabled() and not dialog.head_folder.isEnabled()
    assert not dialog.write_head()


# -- through the window: File ▸ Export to server… passes the head and its writer ---------------
def open_export(window, method: str, head: str = "") -> ServerExportDialog:
    window.decoding.select(window.decoding.method, method)
    if head:
        window.models.head.set_spec(head)
    window.actions.export_server.trigger()
    return window.server.export_dialog


def test_the_window_writes_the_head_for_sglang_and_shows_the_command_serving_it(
    make_window, qtbot, tmp_path
):
    window = make_window()
    dialog = open_export(window, "eagle", head="org/my-head")
    assert dialog.head_source.head == "org/my-head"
    folder = tmp_path / "for sglang"
    dialog.head_engine.setCurrentIndex(dialog.head_engine.findData("sglang"))
    dialog.head_folder.setText(str(folder))
    dialog.write_button.click()
    qtbot.waitUntil(lambda: dialog.head_status.text().startswith("wrote "), timeout=5000)
    words = shlex.split(dialog.texts["sglang"].toPlainText())
    assert words[words.index("--speculative-draft-model-path") + 1] == str(folder)
    assert dialog.commands["sglang"].command == dialog.texts["sglang"].toPlainText()
    (asked,) = window.engine.head_exports
    assert (asked.engine, asked.folder, asked.method) == ("sglang", str(folder), "eagle")
    assert asked.specs["head"] == "org/my-head" and asked.config == window.decoding.config()
    assert window.last_error is None


def test_the_window_writes_off_the_gui_thread_and_the_dialog_waits(make_window, qtbot, tmp_path):
    window = make_window()
    window.engine.export_gate.clear()  # the engine holds the writing until the gate opens
    dialog = open_export(window, "eagle2")
    assert dialog.head_source.head == "embedded"  # the Head picker left empty
    assert write(dialog, "sglang", tmp_path / "head") is False  # not yet: still writing
    assert dialog.head_status.text().startswith("writing the head for SGLang")
    assert not dialog.write_button.isEnabled()
    qtbot.wait(50)  # the window still answers meanwhile
    window.engine.export_gate.set()
    qtbot.waitUntil(lambda: dialog.head_status.text().startswith("wrote "), timeout=5000)
    assert dialog.write_button.isEnabled()
    qtbot.waitUntil(lambda: window.server.head_job is None, timeout=5000)  # its thread ended


def test_a_method_without_a_head_says_so_by_its_label_in_the_window(make_window):
    dialog = open_export(make_window(), "classic")
    assert dialog.head_status.text() == (
        "Classic draft drafts without an EAGLE head: choose an EAGLE method to export one"
    )
    assert not dialog.write_button.isEnabled()


def test_writing_the_head_during_a_run_is_refused_in_one_line(make_window, qtbot, tmp_path):
    from tests.gui_fake import FakeEngine
    from tests.gui_window import wait_idle

    window = make_window(FakeEngine(steps=400, delay=0.01))
    dialog = open_export(window, "eagle")
    window.generate()
    qtbot.waitUntil(lambda: window.engine.produced > 0, timeout=5000)
    assert not write(dialog, "sglang", tmp_path / "head")
    assert dialog.head_status.text() == (
        "wait until the run or measurement ends, then write the head"
    )
    assert dialog.write_button.isEnabled() and window.engine.head_exports == []
    window.stop()
    wait_idle(qtbot, window)
    assert write_and_wait(qtbot, dialog, "sglang", tmp_path / "head")


def write_and_wait(qtbot, dialog: ServerExportDialog, engine: str, folder: Path) -> bool:
    write(dialog, engine, folder)
    qtbot.waitUntil(lambda: dialog.write_button.isEnabled(), timeout=10_000)
    return dialog.head_status.text().startswith("wrote ")


# -- the real export behind the window (the engine in this process, its models not needed) -----
def test_the_in_process_engine_writes_the_head_the_window_asks_for(
    make_window, qtbot, target, tmp_path
):
    from app.engine import SpecdecEngine
    from tests.gui_fake import FakeEngine

    class WritingEngine(FakeEngine):  # runs on the fake, writes heads as the real engine does
        def export_head(self, request):
            return SpecdecEngine().export_head(request)

    head = saved_head(target, tmp_path / "head")
    window = make_window(WritingEngine())
    dialog = open_export(window, "eagle", head=head)
    folder = tmp_path / "for sglang"
    assert write_and_wait(qtbot, dialog, "sglang", folder)
    assert {p.name for p in folder.iterdir()} == FIXTURE_NAMES["sglang"]
    words = shlex.split(dialog.texts["sglang"].toPlainText())
    assert words[words.index("--speculative-token-map") + 1] == str(folder / "hot_ids.pt")
    assert any("fc.bias" in note or "token map" in note for note in dialog.commands["sglang"].notes)
    assert not write_and_wait(qtbot, dialog, "vllm", tmp_path / "for-vllm")
    assert "--arch eagle3" in dialog.head_status.text() and "\n" not in dialog.head_status.text()
    assert window.last_error is None  # a user error stays in the dialog


def test_the_engine_refuses_a_method_without_a_head_and_an_unwritable_folder_in_one_line(
    target, tmp_path
):
    from app.engine import SpecdecEngine
    from app.engine_api import HeadExportRequest

    engine = SpecdecEngine()
    request = HeadExportRequest("sglang", str(tmp_path / "out"), "ngram", CONFIG, "org/target")
    assert_refused_without_a_head(engine, request)
    a_file = file_in_the_way(tmp_path)
    head = saved_head(target, tmp_path / "head")
    under_a_file = str(a_file / "head")
    request = replace(request, method="eagle2", folder=under_a_file, specs={"head": head})
    with pytest.raises(SpecdecError) as refused:
        engine.export_head(request)
    line = str(refused.value)
    assert line.startswith(f"could not write the head into {under_a_file} (")
    assert line.endswith("choose a folder you can write to") and "\n" not in line
    assert a_file.read_text() == "mine"
