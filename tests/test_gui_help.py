"""Keyboard and help: every action has a shortcut in its menu, every control a tooltip, and
Help explains what the window shows."""

from __future__ import annotations

from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractSlider,
    QAbstractSpinBox,
    QComboBox,
    QLineEdit,
    QScrollBar,
    QTabBar,
)

from tests.gui_window import make_window_fixture  # noqa: F401  (fixture)

CONTROLS = (QAbstractButton, QComboBox, QLineEdit, QAbstractSpinBox, QAbstractSlider)


def _has_tip(widget) -> bool:
    """A control says what it does itself or through the composite widget it is part of."""
    while widget is not None:
        if widget.toolTip():
            return True
        widget = widget.parentWidget() if not isinstance(widget, CONTROLS[:1]) else None
    return False


def _qt_internal(widget) -> bool:
    """Parts Qt builds itself (scroll arrows of a tab bar, a table's corner button)."""
    parent = widget.parentWidget()
    return (
        widget.objectName().startswith("qt_")
        or isinstance(widget, QScrollBar)
        or isinstance(parent, (QTabBar, QScrollBar))
    )


def test_every_menu_action_has_a_shortcut(make_window):
    window = make_window()
    missing = []
    for menu_action in window.menuBar().actions():
        for action in menu_action.menu().actions():
            if not action.isSeparator() and action.shortcut().isEmpty():
                missing.append(action.text())
    assert missing == [], missing


def test_every_control_has_a_tooltip(make_window):
    window = make_window()
    missing = []
    for kind in CONTROLS:
        for widget in window.findChildren(kind):
            if _qt_internal(widget):
                continue
            if not _has_tip(widget):
                parent = type(widget.parentWidget()).__name__
                missing.append(f"{type(widget).__name__} {widget.objectName()} in {parent}")
    assert missing == [], missing


def test_help_explains_colours_tau_and_the_plots(make_window, qtbot):
    window = make_window()
    window.actions.help.trigger()
    text = window.help_box.text()
    for words in ("green", "correction", "bonus", "τ", "Plots", "The playground window"):
        assert words in text
