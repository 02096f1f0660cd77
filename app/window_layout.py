"""The window's layout helpers: a scrolling column of panels and a splitter with its stretch
and first sizes (the panels themselves are in app/widgets/)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QScrollArea, QSplitter, QVBoxLayout, QWidget


def scrolled_column(*widgets: QWidget) -> QScrollArea:
    """The widgets one above the other, scrolling vertically, never narrower than they need."""
    column = QWidget()
    layout = QVBoxLayout(column)
    for widget in widgets:
        layout.addWidget(widget)
    layout.addStretch(1)
    scroll = QScrollArea()
    scroll.setWidget(column)
    scroll.setWidgetResizable(True)
    scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
    bar = scroll.verticalScrollBar().sizeHint().width()
    scroll.setMinimumWidth(column.minimumSizeHint().width() + bar + 2)
    return scroll


def split(
    orientation: Qt.Orientation, widgets: list[QWidget], stretch: list[int], sizes: list[int]
) -> QSplitter:
    """The widgets side by side (or one above the other), sharing room by `stretch`."""
    splitter = QSplitter(orientation)
    for index, (widget, factor) in enumerate(zip(widgets, stretch, strict=True)):
        splitter.addWidget(widget)
        if factor:
            splitter.setStretchFactor(index, factor)
    splitter.setSizes(sizes)
    return splitter
