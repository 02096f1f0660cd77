"""The Models panel: models on this machine in the pickers (misfits greyed with the reason, a
target's published heads on top), placement and trust settings reach the engine, and Cancel
stops a load in progress."""

from __future__ import annotations

import time

from app.engine_api import LoadSettings, TargetInfo
from app.widgets.models_panel import TRUST_TIP, ModelsPanel
from specdec_core.control import check_stop
from specdec_core.errors import SpecdecError
from specdec_core.heads.eagle.formats import save_head
from tests.eagle_tiny import tiny_head
from tests.gui_fake import FakeEngine
from tests.gui_window import make_window_fixture, wait_idle  # noqa: F401  (fixture)
from tests.hub_cache import cache_repo, tiny_repo, use_cache
from tests.tiny import LlamaForCausalLM, tiny_config, tiny_loaded


def _panel(qtbot) -> ModelsPanel:
    panel = ModelsPanel()
    qtbot.addWidget(panel)
    return panel


def test_heads_that_fit_the_loaded_target_come_first_and_misfits_are_greyed(
    qtbot, tmp_path, monkeypatch
):
    cache = use_cache(monkeypatch, tmp_path / "cache")
    target = tiny_loaded(1)
    wide = tiny_loaded(1, model=LlamaForCausalLM(tiny_config(hidden=64)))
    cache_repo(cache, "owner/tiny", tiny_repo(tmp_path / "tiny"))
    cache_repo(cache, "a/wide-eagle", save_head(tiny_head(wide), tmp_path / "wide"))
    cache_repo(cache, "z/tiny-eagle", save_head(tiny_head(target), tmp_path / "fits"))
    panel = _panel(qtbot)
    panel.show_loaded(TargetInfo("owner/tiny", "cpu", "float32", 10, tiny_config().to_dict()))
    heads = panel.head.local_items()
    assert [greyed for _, greyed in heads] == [False, True]
    assert heads[0][0].startswith("z/tiny-eagle") and "EAGLE-1 head" in heads[0][0]
    assert (
        heads[1][0].startswith("a/wide-eagle")
        and "hidden size 64, the target's is 32" in (heads[1][0])
    )
    assert [text.split()[0] for text, _ in panel.draft.local_items()] == ["owner/tiny"]
    panel.head.combo.setCurrentIndex(panel.head.combo.findText(heads[0][0]))
    assert panel.head.spec() == "z/tiny-eagle"  # the label is not part of the spec


def test_choosing_a_known_target_suggests_its_published_heads(qtbot, tmp_path, monkeypatch):
    use_cache(monkeypatch, tmp_path / "empty")
    panel = _panel(qtbot)
    panel.target.set_spec("Qwen/Qwen3-8B")
    heads = [text.split()[0] for text, _ in panel.head.local_items()]
    assert heads == ["Tengyunw/qwen3_8b_eagle3", "AngelSlim/Qwen3-8B_eagle3"]


def test_an_added_folder_lists_its_gguf_files(qtbot, tmp_path, monkeypatch):
    use_cache(monkeypatch, tmp_path / "empty")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "mine.gguf").write_bytes(b"GGUF" + b"\0" * 10)
    panel = _panel(qtbot)
    panel.add_folder(str(tmp_path / "models"))
    assert panel.target.local_items()[0][0].startswith(str(tmp_path / "models" / "mine.gguf"))
    assert panel.values()["model_folders"] == [str(tmp_path / "models")]


def test_trust_remote_code_warns_in_its_tooltip(qtbot):
    panel = _panel(qtbot)
    assert panel.trust_remote_code.toolTip() == TRUST_TIP and "trust" in TRUST_TIP
    assert not panel.trust_remote_code.isChecked()


def test_placement_and_trust_reach_the_engine_and_are_kept(make_window, qtbot):  # noqa: F811
    engine = FakeEngine()
    window = make_window(engine)
    window.models.device_map.setCurrentText("auto")
    window.models.max_memory.setText("0=20GiB,cpu=64GiB")
    window.models.trust_remote_code.setChecked(True)
    window.load_target()
    qtbot.waitUntil(lambda: len(engine.loads) == 2 and window.ready(), timeout=5000)
    assert engine.load_settings[-1] == LoadSettings("auto", "0=20GiB,cpu=64GiB", True)
    values = window.models.values()
    assert values["device_map"] == "auto" and values["trust_remote_code"] is True


def test_cancel_stops_a_load_in_progress(make_window, qtbot):  # noqa: F811
    engine = FakeEngine()
    window = make_window(engine)

    def slow(target, progress, stop=None):
        for _ in range(500):  # a download: the flag is checked between chunks
            progress("downloading model.safetensors: 1.2 / 4.9 GB, about 3 min left", 0.2)
            check_stop(stop)
            time.sleep(0.01)
        raise AssertionError("Cancel did not stop the load")

    engine.load_target = slow
    window.load_target()
    qtbot.waitUntil(lambda: "downloading" in window.models.message.text(), timeout=5000)
    assert window.models.cancel_button.isEnabled()
    window.models.cancel_button.click()
    qtbot.waitUntil(lambda: window.last_error is not None, timeout=5000)
    assert "cancelled" in window.last_error and window.ready()
    assert not window.models.cancel_button.isEnabled() and window.models.load_button.isEnabled()


class HeadFailingEngine(FakeEngine):
    """A run whose head load begins (its progress line) and fails."""

    def events(self, request, stop, progress):
        progress("loading head '/tmp'", 0.0)
        raise SpecdecError("/tmp holds no EAGLE head (no config.json); choose a head folder")
        yield  # a generator, as every engine's events


def test_a_head_load_that_failed_no_longer_reads_as_loading(make_window, qtbot):  # noqa: F811
    window = make_window(HeadFailingEngine())
    window.generate()
    wait_idle(qtbot, window)
    message = window.models.message.text()
    assert "loading head" not in message
    assert "head '/tmp' did not load" in message
    assert message.startswith("target embedded")  # the loaded target's line stays on top
    assert "no EAGLE head" in window.status.currentMessage()
