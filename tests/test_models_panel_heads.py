"""The Models panel's pickers for the other drafting weights: Medusa heads, an MLP speculator and
MTP layers. A typed spec reaches a run's request under what the method needs; the pickers'
values and recent lists are kept with the panel's settings (older settings give the defaults);
every picker stays on view, labelled, without pushing the Decoding panel out of a 1280×800
window; local models that state MTP layers are offered for MTP; the bundled speculator, made
for the embedded model, is refused for another target in one line that says how to get one."""

from __future__ import annotations

import json

import pytest
from PySide6.QtCore import QPoint, QRect
from PySide6.QtWidgets import QFormLayout

from app import screen
from app.engine import SpecdecEngine
from app.widgets.models_panel import ModelsPanel
from specdec_core.errors import SpecdecError
from tests.gui_window import make_window_fixture  # noqa: F401  (fixture)
from tests.hub_cache import use_cache
from tests.tiny import tiny_config, tiny_loaded

LABELS = {"medusa": "Medusa heads", "speculator": "MLP speculator", "mtp": "MTP layers"}


def _panel(qtbot) -> ModelsPanel:
    panel = ModelsPanel()
    qtbot.addWidget(panel)
    return panel


def test_a_spec_typed_in_the_medusa_picker_reaches_the_run_request(make_window, qtbot):  # noqa: F811
    window = make_window()
    edit = window.models.medusa.combo.lineEdit()
    edit.clear()
    qtbot.keyClicks(edit, "me/my-medusa-heads")
    assert window.models.specs()["medusa"] == "me/my-medusa-heads"
    request = window.inputs.request("medusa")
    assert request.specs["medusa"] == "me/my-medusa-heads"
    assert request.specs["draft"] == window.models.draft.spec()  # the others are still there


def test_the_speculator_and_mtp_specs_reach_specs_under_what_their_methods_need(qtbot):
    panel = _panel(qtbot)
    panel.speculator.set_spec("/home/me/speculator")
    panel.mtp.set_spec("/models/copy-of-target")
    assert panel.specs() == {
        "draft": panel.draft.spec(),
        "head": panel.head.spec(),
        "medusa": "embedded",
        "speculator": "/home/me/speculator",
        "mtp": "/models/copy-of-target",
        "dflash": "embedded",
    }


def test_a_fresh_panel_drafts_with_the_bundled_heads_and_the_targets_own_mtp_layers(qtbot):
    panel = _panel(qtbot)
    specs = panel.specs()
    assert (specs["medusa"], specs["speculator"], specs["mtp"]) == ("embedded",) * 3
    assert "specdec train mlp-speculator" in panel.speculator.toolTip()
    offered = [panel.speculator.combo.itemText(i) for i in range(panel.speculator.combo.count())]
    assert offered == ["embedded"]


def test_the_bundled_speculator_on_another_target_is_refused_in_one_line_naming_how_to_get_one(
    qtbot,
):
    panel = _panel(qtbot)
    engine = SpecdecEngine(tiny_loaded(1))
    with pytest.raises(SpecdecError) as error:
        engine.extra("mlp-speculator", panel.specs())
    message = str(error.value)
    assert "\n" not in message and "specdec train mlp-speculator" in message


def test_the_new_pickers_values_and_recent_lists_survive_a_settings_round_trip(qtbot):
    panel = _panel(qtbot)
    panel.medusa.remember("FasterDecoding/medusa-vicuna-7b-v1.3")
    panel.medusa.set_spec("/heads/medusa-mine")
    panel.speculator.remember("ibm-fms/llama3-8b-accelerator")
    panel.speculator.set_spec("/heads/speculator-mine")
    panel.mtp.remember("/models/mimo-copy")
    panel.mtp.set_spec("/models/mimo-copy")
    saved = json.loads(json.dumps(panel.values()))  # as the settings file stores it
    again = _panel(qtbot)
    again.apply(saved)
    assert again.specs() == panel.specs()
    assert again.medusa.recent() == ["FasterDecoding/medusa-vicuna-7b-v1.3"]
    assert again.speculator.recent() == ["ibm-fms/llama3-8b-accelerator"]
    assert again.mtp.recent() == ["/models/mimo-copy"]


def test_settings_saved_before_the_new_pickers_give_their_defaults(qtbot):
    panel = _panel(qtbot)
    panel.medusa.set_spec("/heads/medusa-mine")
    older = {k: v for k, v in panel.values().items() if not k.endswith(tuple(LABELS))}
    fresh = _panel(qtbot)
    fresh.apply(older)
    assert (fresh.medusa.spec(), fresh.speculator.spec(), fresh.mtp.spec()) == ("embedded",) * 3
    assert fresh.medusa.recent() == [] and fresh.head.spec() == panel.head.spec()


def test_every_picker_is_shown_with_a_label_naming_what_it_holds(qtbot):
    panel = _panel(qtbot)
    panel.show()
    form = panel.layout()
    assert isinstance(form, QFormLayout)
    for needs, label in LABELS.items():
        picker = panel.extras[needs]
        assert picker.isVisible()
        assert form.labelForField(picker).text() == label


def test_the_decoding_panel_stays_in_view_at_1280x800_below_every_picker(
    make_window,  # noqa: F811
    qtbot,
    monkeypatch,
):
    window = make_window()
    monkeypatch.setattr(screen, "available", lambda widget: QRect(0, 0, 1280, 800))
    window.resize(1280, 800)
    qtbot.wait(50)
    left = window.splitter.widget(0)
    viewport = left.viewport()
    top = window.decoding.mapTo(viewport, QPoint(0, 0)).y()
    assert window.models.mtp.isVisible()
    assert top >= 0 and top + window.decoding.height() <= viewport.height()


def test_local_models_stating_mtp_layers_are_offered_for_mtp(qtbot, tmp_path, monkeypatch):
    use_cache(monkeypatch, tmp_path / "empty")
    folder = tmp_path / "models"
    for name, extra in (("with-mtp", {"num_nextn_predict_layers": 1}), ("plain", {})):
        (folder / name).mkdir(parents=True)
        config = {**tiny_config().to_dict(), **extra, "architectures": ["LlamaForCausalLM"]}
        (folder / name / "config.json").write_text(json.dumps(config))
    panel = _panel(qtbot)
    panel.add_folder(str(folder))
    offered = [text.split()[0] for text, _ in panel.mtp.local_items()]
    assert offered == [str(folder / "with-mtp")]
    drafts = {text.split()[0] for text, _ in panel.draft.local_items()}
    assert drafts == {str(folder / "with-mtp"), str(folder / "plain")}


@pytest.mark.parametrize("needs", ["medusa", "speculator", "mtp"])
def test_weights_that_just_drafted_go_to_the_top_of_their_pickers_recent_list(make_window, needs):  # noqa: F811
    from dataclasses import replace

    from app.engine_api import MethodInfo

    window = make_window()
    registries = window.session.registries
    method = MethodInfo(f"uses-{needs}", f"uses {needs}", needs)
    window.session.registries = replace(registries, methods=(*registries.methods, method))
    picker = window.models.extras[needs]
    picker.set_spec("/models/that-worked")
    window.inputs.remember_extra(method.name)
    assert picker.recent()[0] == "/models/that-worked"
