"""Settings persist across windows; a corrupt file falls back to the defaults with a note."""

from __future__ import annotations

import json

from app import qt_compat
from app.settings import DEFAULTS, load_settings, save_settings, settings_path
from tests.gui_window import make_window_fixture  # noqa: F401  (fixture)


def test_settings_round_trip_through_an_atomic_write(tmp_path):
    path = tmp_path / "settings.json"
    values = {**DEFAULTS, "k": 7, "temperature": 0.7, "method": "eagle2", "recent_target": ["a/b"]}
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
    path.write_text(json.dumps({"k": "seven", "temperature": 1, "raw": 1, "prompt": "hi"}))
    loaded, note = load_settings(path)
    assert note is None
    assert loaded["k"] == DEFAULTS["k"] and loaded["raw"] is False
    assert loaded["temperature"] == 1 and loaded["prompt"] == "hi"


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


def test_the_window_survives_a_corrupt_settings_file(make_window, tmp_path):
    file = tmp_path / "broken.json"
    file.write_bytes(b"\xff\xfe not json at all")
    window = make_window(settings_file=file)
    assert window.settings_note and "using defaults" in window.settings_note
    assert window.decoding.k.value() == DEFAULTS["k"]
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
