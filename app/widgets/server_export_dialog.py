"""File ▸ Export to server…: the vLLM and SGLang commands that serve the current setting.

One box per engine: the command (or why this setting cannot be served), its notes, Copy (to
the clipboard) and Save as shell script… (an executable `#!/usr/bin/env bash` file,
`specdec_core.serve.write_script`). The commands are built by the caller
(`app/server_controller.py`); the dialog only shows and saves them.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtGui import QFont, QGuiApplication
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from specdec_core.serve import ServeCommand, write_script

ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang"}


class ServerExportDialog(QDialog):
    def __init__(
        self, commands: dict[str, ServeCommand | str], parent: QWidget | None = None
    ) -> None:
        """`commands`: engine -> its command, or the reason there is none."""
        super().__init__(parent)
        self.setWindowTitle("Export to server")
        self.commands = commands
        self.texts: dict[str, QPlainTextEdit] = {}
        self.status = QLabel("")
        layout = QVBoxLayout(self)
        for engine, command in commands.items():
            layout.addWidget(self._box(engine, command))
        layout.addWidget(self.status)
        close = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        close.rejected.connect(self.reject)
        layout.addWidget(close)
        self.resize(900, 520)

    def _box(self, engine: str, command: ServeCommand | str) -> QGroupBox:
        box = QGroupBox(ENGINE_NAMES.get(engine, engine))
        text = QPlainTextEdit(command.command if isinstance(command, ServeCommand) else command)
        text.setReadOnly(True)
        text.setFont(QFont("monospace"))
        text.setMaximumHeight(90)
        self.texts[engine] = text
        notes = QLabel(
            "\n".join(f"• {note}" for note in command.notes)
            if isinstance(command, ServeCommand)
            else ""
        )
        notes.setWordWrap(True)
        notes.setStyleSheet("color: #555")
        copy = QPushButton("Copy")
        save = QPushButton("Save as shell script…")
        for button in (copy, save):
            button.setEnabled(isinstance(command, ServeCommand))
        copy.clicked.connect(lambda: self.copy(engine))
        save.clicked.connect(lambda: self._save_dialog(engine))
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(copy)
        buttons.addWidget(save)
        layout = QVBoxLayout(box)
        layout.addWidget(text)
        layout.addWidget(notes)
        layout.addLayout(buttons)
        return box

    def copy(self, engine: str) -> None:
        command = self.commands[engine]
        if isinstance(command, ServeCommand):
            QGuiApplication.clipboard().setText(command.command)
            self.status.setText(f"copied the {ENGINE_NAMES.get(engine, engine)} command")

    def _save_dialog(self, engine: str) -> None:
        path, _ = QFileDialog.getSaveFileName(
            self, "Save as shell script", f"serve-{engine}.sh", "Shell script (*.sh);;All (*)"
        )
        if path:
            self.save(engine, Path(path))

    def save(self, engine: str, path: Path) -> None:
        command = self.commands[engine]
        if not isinstance(command, ServeCommand):
            return
        try:
            write_script(command, path)
        except OSError as error:
            self.status.setText(f"could not save {path}: {error}")
            return
        self.status.setText(f"saved {path} (run it on the server machine)")
