"""Errors shown to the user without blocking: a dialog that stays open beside the window and
the message on the status line. An engine process that ended offers Restart engine: a new
process with the models chosen in the Models panel (the prompt and settings stay)."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtWidgets import QMessageBox, QStatusBar, QWidget

from app.engine_api import engine_ended

SHOWN_MS = 15_000  # how long the status line keeps an error


class ErrorDialog:
    def __init__(self, parent: QWidget, bar: QStatusBar, restart: Callable[[], None]) -> None:
        self.parent, self.bar, self.restart = parent, bar, restart
        self.last_error: str | None = None
        self.box: QMessageBox | None = None

    def show(self, message: str, user: bool = True) -> None:
        """`user`: caused by the input ("Cannot do that"), else a failure of the engine."""
        self.last_error = message
        title = "Cannot do that" if user else "Something went wrong"
        self.box = QMessageBox(QMessageBox.Icon.Warning, title, message, parent=self.parent)
        if engine_ended(message):  # one click starts a new engine with the same models
            restart = self.box.addButton("Restart engine", QMessageBox.ButtonRole.AcceptRole)
            restart.clicked.connect(self.restart)
            self.box.addButton(QMessageBox.StandardButton.Close)
        self.box.open()
        self.bar.showMessage(message, SHOWN_MS)
