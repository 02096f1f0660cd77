"""The window fits the screens users have: at 1280×800, 1600×1000 and 1920×1080 nothing is
clipped or squeezed below its minimum, its minimum size never outgrows the screen whichever
tabs were opened, and fresh settings open it inside the screen (geometry checks; screenshots
in docs/ show the same)."""

from __future__ import annotations

import pyqtgraph as pg
import pytest
from PySide6.QtCore import QPoint, QRect, Qt
from PySide6.QtWidgets import QAbstractScrollArea, QWidget

from app import screen
from app.engine import SpecdecEngine
from tests.gui_fake import FakeEngine
from tests.gui_window import make_window_fixture  # noqa: F401  (fixture)

SIZES = [(1280, 800), (1600, 1000), (1920, 1080)]


def _inside_scroll_area(widget: QWidget, window: QWidget) -> bool:
    parent = widget.parentWidget()
    while parent is not None and parent is not window:
        if isinstance(parent, QAbstractScrollArea):
            return True
        parent = parent.parentWidget()
    return False


def _clipped(window: QWidget) -> list[str]:
    """Visible widgets that reach outside the window (scroll areas clip by design)."""
    bounds = window.rect().adjusted(-1, -1, 1, 1)
    out = []
    for widget in window.findChildren(QWidget):
        if not widget.isVisible() or widget.isWindow() or _inside_scroll_area(widget, window):
            continue
        top_left = widget.mapTo(window, QPoint(0, 0))
        rect = QRect(top_left, widget.size())
        if not bounds.contains(rect):
            out.append(f"{type(widget).__name__} {widget.objectName()} at {rect.getRect()}")
    return out


@pytest.mark.parametrize("width, height", SIZES)
@pytest.mark.parametrize("tab", ["Output", "Compare", "Chat", "Sweep", "Server"])
def test_nothing_is_clipped_at_common_screen_sizes(make_window, qtbot, width, height, tab):
    window = make_window()
    names = [window.tabs.tabText(i) for i in range(window.tabs.count())]
    window.tabs.setCurrentIndex(names.index(tab))
    window.resize(width, height)
    qtbot.wait(50)
    assert window.width() <= width and window.height() <= height, "minimum size too large"
    assert _clipped(window) == []
    for pane in (window.splitter.widget(i) for i in range(window.splitter.count())):
        assert pane.width() >= min(pane.minimumSizeHint().width(), pane.sizeHint().width())
    right = window.splitter.widget(window.splitter.count() - 1)
    assert right.mapTo(window, QPoint(right.width(), 0)).x() <= window.width()
    for plot in window.findChildren(pg.PlotWidget):  # a plot wider than its view is cut off
        if plot.isVisible():
            need = plot.plotItem.effectiveSizeHint(Qt.SizeHint.MinimumSize).width()
            assert need <= plot.viewport().width() + 1, type(plot).__name__


@pytest.mark.parametrize("width, height", SIZES)
def test_comparing_every_method_scrolls_sideways_instead_of_widening_the_window(
    make_window, qtbot, width, height
):
    window = make_window()
    window.tabs.setCurrentIndex(1)
    for index in range(8):  # as many columns as the Compare tab offers methods
        window.compare.columns.add_column(f"m{index}", f"EAGLE-2 + suffix decoding {index}", "#000")
    window.resize(width, height)
    qtbot.wait(50)
    assert window.width() <= width and window.height() <= height
    assert _clipped(window) == []


@pytest.mark.parametrize("width, height", SIZES)
def test_fresh_settings_open_inside_the_screen_and_every_tab_keeps_the_minimum_on_it(
    make_window, qtbot, monkeypatch, width, height
):
    room = QRect(0, 0, width, height)  # the screen's available geometry
    monkeypatch.setattr(screen, "available", lambda widget: room)
    engine = FakeEngine()
    engine.registries = SpecdecEngine().registries  # every method, with its real label
    window = make_window(engine, fresh=True)
    for index in range(window.tabs.count()):
        window.tabs.setCurrentIndex(index)
        qtbot.wait(20)
        tab = window.tabs.tabText(index)
        hint = window.minimumSizeHint()
        assert hint.width() <= width and hint.height() <= height, f"{tab}: {hint}"
        assert window.minimumWidth() <= width and window.minimumHeight() <= height, tab
        assert room.contains(window.frameGeometry()), f"{tab}: {window.frameGeometry()}"
        status = window.statusBar()
        shown = QRect(status.mapToGlobal(QPoint(0, 0)), status.size())
        assert status.isVisible() and room.contains(shown), f"{tab}: status bar at {shown}"
