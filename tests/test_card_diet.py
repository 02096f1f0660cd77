"""A drafter's diet one hover away: each bundled drafter's line in the Models panel says what its
card records it was fed (tokens, the target's own answers or a dataset's), for how many epochs,
how long and where, and how it validated."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from app.widgets.models_panel import ModelsPanel
from specdec_core.resources import resource_path
from specdec_core.training.card import EpochRecord, ModelCard, Validation, diet, read_card


def test_the_diet_names_tokens_source_epochs_time_machine_and_validation():
    card = ModelCard(
        kind="eagle", data=("sharegpt",), tokens=250_025, epochs=4, train_seconds=1321,
        environment={"machine": "AMD EPYC (x86_64)"},
        validation=EpochRecord(4, 252, 0.0, Validation(0.2972, 1.3612)),
    )  # fmt: skip
    assert diet(card) == (
        "fed 250,025 tokens of a dataset's answers (sharegpt) for 4 epochs, 22m01s on "
        "AMD EPYC (x86_64); held-out top-1 0.30, tau 1.36"
    )
    own = ModelCard(kind="eagle", data=("magpie", "resources/corpus/embedded"), tokens=10,
                    epochs=1.5)  # fmt: skip
    assert diet(own).startswith("fed 10 tokens of the target's own answers (magpie, ")
    both = ModelCard(kind="draft", data=("self", "sharegpt"), tokens=10, epochs=2)
    assert "of the target's own answers and a dataset's (self, sharegpt)" in diet(both)
    assert diet(ModelCard(kind="eagle", partial=Validation(0.5))) == (
        "still training (a partial card)"
    )


@pytest.mark.parametrize(
    ("picker", "folder"),
    [("head", "head"), ("medusa", "medusa"), ("speculator", "mlp-speculator"), ("draft", "draft")],
)
def test_each_bundled_drafter_hovers_with_its_diet(qtbot, picker, folder):
    panel = ModelsPanel()
    qtbot.addWidget(panel)
    combo = panel.extras[picker].combo
    index = combo.findText("embedded")
    tip = combo.itemData(index, Qt.ItemDataRole.ToolTipRole)
    assert tip.splitlines()[-1] == diet(read_card(resource_path(folder)))
    assert "tokens of" in tip and "epochs" in tip
