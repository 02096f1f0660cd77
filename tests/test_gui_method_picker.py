"""The method picker groups the engine's methods by family, each group under a heading that
cannot be chosen, and every method says in its tooltip what it needs and what it drafts."""

from PySide6.QtCore import Qt

from app.engine_api import MethodInfo, Registries
from specdec_core.run.methods import FAMILIES, METHODS
from tests.gui_fake import POLICIES, FakeEngine
from tests.gui_window import make_window_fixture  # noqa: F401  (fixture)

GROUPED = (
    MethodInfo("ar", "Autoregressive", None, summary="the target alone"),
    MethodInfo("ngram", "N-gram lookup", None, family="no training", summary="copies n-grams"),
    MethodInfo("eagle", "EAGLE", "head", family="EAGLE heads", summary="a head drafts a chain"),
    MethodInfo("eagle2", "EAGLE-2", "head", tree=True, family="EAGLE heads"),
)


class GroupedEngine(FakeEngine):
    def registries(self) -> Registries:
        return Registries(GROUPED, POLICIES, FAMILIES)


def test_methods_are_grouped_by_family_under_headings_that_cannot_be_chosen(make_window):
    window = make_window(GroupedEngine())
    combo = window.decoding.method
    rows = [(combo.itemText(i), combo.itemData(i)) for i in range(combo.count())]
    assert rows == [
        ("BASELINE", None),
        ("Autoregressive", "ar"),
        ("EAGLE HEADS", None),
        ("EAGLE", "eagle"),
        ("EAGLE-2", "eagle2"),
        ("NO TRAINING", None),
        ("N-gram lookup", "ngram"),
    ]
    heading = combo.model().item(0)
    assert not heading.isEnabled() and not heading.isSelectable()
    tip = combo.itemData(combo.findData("eagle"), Qt.ItemDataRole.ToolTipRole)
    assert tip == "eagle: a head drafts a chain"
    assert window.decoding.method_name() in {"ar", "eagle", "eagle2", "ngram"}  # never a heading


def test_every_registered_method_has_a_known_family_and_a_summary():
    for method in METHODS.values():
        assert method.family in FAMILIES, method.name
        assert method.summary, method.name


def test_a_fresh_window_never_selects_a_heading(make_window):
    window = make_window(GroupedEngine(), fresh=True)
    assert window.decoding.method.currentData() is not None
