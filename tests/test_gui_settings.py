"""Settings persist across windows as the previous version wrote them; a corrupt file falls back
to the defaults with a note."""

from __future__ import annotations

import json
from dataclasses import asdict, replace

from app import qt_compat
from app.settings import DEFAULTS, GuiSettings, load_settings, save_settings, settings_path
from tests.gui_window import make_window_fixture  # noqa: F401  (fixture)

# a settings file as the version before `GuiSettings` wrote it (json.dumps of a dict, indent 2)
PREVIOUS_VERSION = """{
  "target": "HuggingFaceTB/SmolLM2-360M-Instruct",
  "draft": "embedded",
  "head": "/home/me/heads/eagle3-smol",
  "device": "cpu",
  "dtype": "float32",
  "recent_target": [
    "HuggingFaceTB/SmolLM2-360M-Instruct",
    "embedded"
  ],
  "recent_draft": [],
  "recent_head": [
    "/home/me/heads/eagle3-smol"
  ],
  "device_map": "none",
  "max_memory": "",
  "trust_remote_code": false,
  "model_folders": [
    "/home/me/heads"
  ],
  "method": "eagle2",
  "policy": "threshold",
  "k": 6,
  "temperature": 0.7,
  "top_p": 0.9,
  "max_new_tokens": 200,
  "seed": 3,
  "tree_depth": 0,
  "tree_topk": 0,
  "tree_tokens": 32,
  "raw": true,
  "show_rejected": true,
  "chat_mode": false,
  "compare_methods": [
    "eagle",
    "eagle2"
  ],
  "prompt": "Write a haiku about caches.",
  "geometry": "",
  "splitter": "",
  "server_url": "http://gpu-box:8000"
}"""


def test_a_settings_file_of_the_previous_version_loads_every_value(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text(PREVIOUS_VERSION)
    loaded, note = load_settings(path)
    assert note is None
    assert loaded == GuiSettings(
        target="HuggingFaceTB/SmolLM2-360M-Instruct",
        head="/home/me/heads/eagle3-smol",
        device="cpu",
        dtype="float32",
        recent_target=("HuggingFaceTB/SmolLM2-360M-Instruct", "embedded"),
        recent_head=("/home/me/heads/eagle3-smol",),
        model_folders=("/home/me/heads",),
        method="eagle2",
        policy="threshold",
        k=6,
        temperature=0.7,
        top_p=0.9,
        max_new_tokens=200,
        seed=3,
        tree_tokens=32,
        raw=True,
        show_rejected=True,
        compare_methods=("eagle", "eagle2"),
        prompt="Write a haiku about caches.",
        server_url="http://gpu-box:8000",
    )
    save_settings(loaded, path)  # written back in the same format, key for key
    saved, previous = json.loads(path.read_text()), json.loads(PREVIOUS_VERSION)
    assert {key: saved[key] for key in previous} == previous
    later = {key: value for key, value in saved.items() if key not in previous}  # newer fields
    assert later == json.loads(json.dumps({key: asdict(DEFAULTS)[key] for key in later}))


def test_settings_round_trip_through_an_atomic_write(tmp_path):
    path = tmp_path / "settings.json"
    values = replace(DEFAULTS, k=7, temperature=0.7, method="eagle2", recent_target=("a/b",))
    save_settings(values, path)
    loaded, note = load_settings(path)
    assert note is None and loaded == values
    assert [p.name for p in tmp_path.iterdir()] == ["settings.json"]  # no temporary left


def test_a_corrupt_file_falls_back_to_defaults_with_a_note(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text('{"k": 7, "temperature": ')  # a crash mid-write by another program
    loaded, note = load_settings(path)
    assert loaded == DEFAULTS
    assert note and "using defaults" in note
    assert (tmp_path / "settings.json.corrupt").exists()


def test_values_of_the_wrong_type_take_their_default(tmp_path):
    path = tmp_path / "settings.json"
    stored = {"k": "seven", "temperature": 1, "raw": 1, "prompt": "hi", "recent_head": [1, "a"]}
    path.write_text(json.dumps({**stored, "a key of a later version": True}))
    loaded, note = load_settings(path)
    assert note is None
    assert loaded.k == DEFAULTS.k and loaded.raw is False and loaded.recent_head == ()
    assert loaded.temperature == 1.0 and loaded.prompt == "hi"


def test_the_config_dir_can_be_overridden(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CONFIG_DIR", str(tmp_path))
    assert settings_path() == tmp_path / "settings.json"


def test_the_window_restores_models_sliders_method_and_geometry(make_window, tmp_path):
    file = tmp_path / "window.json"
    first = make_window(settings_file=file)
    first.decoding.k.setValue(7)
    first.decoding.temperature.setValue(0.7)
    first.decoding.select(first.decoding.method, "eagle2")
    first.decoding.select(first.decoding.policy, "threshold")
    first.decoding.max_new_tokens.setValue(33)
    first.models.draft.set_spec("smollm2")
    first.prompt.set_text("hello there")
    first.compare.checks["eagle2"].setChecked(True)
    first.move(37, 41)
    first.resize(first.minimumSizeHint())
    size, pos = first.size(), first.pos()  # as far as the (offscreen) screen allows
    first.close()

    second = make_window(settings_file=file)
    assert second.decoding.k.value() == 7
    assert abs(second.decoding.temperature.value() - 0.7) < 1e-9
    assert second.decoding.method_name() == "eagle2"
    assert second.decoding.policy_name() == "threshold"
    assert second.decoding.max_new_tokens.value() == 33
    assert second.models.draft.spec() == "smollm2"
    assert second.prompt.text() == "hello there"
    assert second.compare.selected() == ["ar", "classic", "eagle2"]
    assert second.pos().y() == pos.y()  # x is clamped to the small offscreen screen
    assert second.size() == size


def test_the_window_restores_the_other_heads_and_the_policy_profile(make_window, tmp_path):
    from specdec_core.run.policy_profile import KindSetting, PolicyProfile

    chat = KindSetting("chat", 0.1, 0.0, 0.0, 1, (1.0, 0.0))
    profile = PolicyProfile("threshold", "tau", 0.05, (chat,))
    profile_file = profile.save(tmp_path / "profile.json")
    file = tmp_path / "heads.json"
    first = make_window(settings_file=file)
    first.models.medusa.set_spec("/models/medusa-heads")
    first.models.speculator.set_spec("/models/speculator")
    first.models.mtp.set_spec("/models/copy-with-mtp")
    first.decoding.set_profile(str(profile_file))
    first.close()

    second = make_window(settings_file=file)
    assert second.models.medusa.spec() == "/models/medusa-heads"
    assert second.models.speculator.spec() == "/models/speculator"
    assert second.models.mtp.spec() == "/models/copy-with-mtp"
    assert second.decoding.profile_path() == str(profile_file)


def test_a_window_opens_on_the_previous_versions_settings_and_saves_them_alike(
    make_window, tmp_path
):
    file = tmp_path / "previous.json"
    file.write_text(PREVIOUS_VERSION)
    window = make_window(settings_file=file)
    assert window.models.target.spec() == "HuggingFaceTB/SmolLM2-360M-Instruct"
    assert window.models.head.recent() == ["/home/me/heads/eagle3-smol"]
    assert window.decoding.method_name() == "eagle2" and window.decoding.k.value() == 6
    assert window.decoding.tree_tokens.value() == 32 and window.prompt.raw.isChecked()
    assert window.compare.chosen() == ["eagle", "eagle2"]
    assert window.server.url() == "http://gpu-box:8000"
    window.close()
    saved = json.loads(file.read_text())
    assert set(saved) == set(asdict(DEFAULTS)) and set(json.loads(PREVIOUS_VERSION)) < set(saved)
    unchanged = ("target", "head", "method", "k", "temperature", "prompt", "server_url")
    previous = json.loads(PREVIOUS_VERSION)
    assert {key: saved[key] for key in unchanged} == {key: previous[key] for key in unchanged}


def test_the_window_survives_a_corrupt_settings_file(make_window, tmp_path):
    file = tmp_path / "broken.json"
    file.write_bytes(b"\xff\xfe not json at all")
    window = make_window(settings_file=file)
    assert window.settings_note and "using defaults" in window.settings_note
    assert window.decoding.k.value() == DEFAULTS.k
    assert window.ready()


def test_the_pyside_refcount_workaround_targets_only_the_broken_release():
    assert qt_compat.needs_workaround("6.12.0", (3, 11))
    assert not qt_compat.needs_workaround("6.12.0", (3, 12))
    assert not qt_compat.needs_workaround("6.11.3", (3, 11))


def test_the_engine_lists_each_policy_as_lossy_or_not_at_its_defaults():
    from app.engine import SpecdecEngine

    policies = {policy.name: policy for policy in SpecdecEngine().registries().policies}
    assert not policies["lossless"].lossy
    assert policies["ensemble"].lossy and policies["threshold"].lossy  # w = 0.5 mixes in q
    assert dict(policies["threshold"].params) == {"tau": 0.1}
