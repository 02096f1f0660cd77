"""Where a new window opens: never larger than the room its screen has.

The room is the screen's available geometry (panels and docks left out). A window opened
without saved geometry gets `DEFAULT_SIZE`, or less where the room is smaller, with space
left for the frame a window manager adds around it, so the status bar stays on the screen.
"""

from __future__ import annotations

from PySide6.QtCore import QMargins, QRect, QSize
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QWidget

DEFAULT_SIZE = QSize(1600, 1000)
FRAME = QMargins(4, 40, 4, 4)  # the most a window manager adds: borders, a title bar above


def available(widget: QWidget) -> QRect:
    """The room on `widget`'s screen (its primary screen before it shows)."""
    screen = widget.screen() or QGuiApplication.primaryScreen()
    return screen.availableGeometry()


def place(window: QWidget) -> None:
    """Size a window that has no saved geometry to its screen and centre it there (`move`
    places the frame's corner)."""
    inside = available(window).marginsRemoved(FRAME)
    window.resize(DEFAULT_SIZE.boundedTo(inside.size()))
    left = inside.x() + max(0, (inside.width() - window.width()) // 2) - FRAME.left()
    top = inside.y() + max(0, (inside.height() - window.height()) // 2) - FRAME.top()
    window.move(left, top)
