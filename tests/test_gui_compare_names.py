"""Compare names each method as the Method box does: its check box, its column, its table row
and the plots' key; the internal names (eagle2-lookup, classic, …) are only in tooltips."""

from __future__ import annotations

import html
import re

from PySide6.QtWidgets import QAbstractButton, QLabel

from tests.gui_fake import METHODS
from tests.gui_window import make_window_fixture, wait_idle  # noqa: F401  (fixture)

INTERNAL = re.compile(r"\b(?:" + "|".join(re.escape(m.name) for m in METHODS) + r")\b")


def test_compare_names_every_method_as_the_method_box_does(qtbot, make_window):
    window = make_window()
    box = window.decoding.method
    labels = {box.itemData(i): box.itemText(i) for i in range(box.count())}
    assert labels["eagle2-lookup"] != "eagle2-lookup"  # a label that differs from the name
    window.compare.set_selected(["eagle2", "eagle2-lookup"])
    window.prompt.set_text("Tell me a story.")
    window.run_compare()
    wait_idle(qtbot, window)
    compare = window.compare
    assert {name: check.text() for name, check in compare.checks.items()} == labels
    ran = ["ar", "eagle2", "eagle2-lookup"]
    assert {m: c.header.text() for m, c in compare.columns.columns.items()} == {
        m: labels[m] for m in ran
    }
    table = compare.table
    assert [table.item(row, 0).text() for row in range(table.rowCount())] == [
        labels[m] for m in ran
    ]
    key = html.unescape(window.plots.key.text()).replace("\xa0", " ").replace("\u2011", "-")
    assert all(labels[m] in key for m in ran)
    shown = [w.text() for w in compare.findChildren(QLabel) + compare.findChildren(QAbstractButton)]
    shown += [table.item(r, c).text() for r in range(table.rowCount()) for c in range(2)]
    assert [text for text in shown if INTERNAL.search(text)] == []
