"""File ▸ Export to server…: the vLLM and SGLang commands that serve the current setting, and
the EAGLE head written as the chosen engine loads it.

One box per engine: the command (or why this setting cannot be served), its notes, Copy (to
the clipboard) and Save as shell script… (an executable `#!/usr/bin/env bash` file,
`specdec_core.serve.write_script`). The commands are built by the caller
(`app/server_controller.py`); the dialog only shows and saves them.

Below, for a method that drafts with an EAGLE head: the engine (vLLM / SGLang), a folder and
Write head. Writing the head reads and rewrites its weights, which needs torch, and the
window's process never imports torch: the caller passes a `HeadWriter` that starts the writing
in the engine process (`specdec_core.head_export.export_head`, then `serve_command` on the
folder), off the GUI thread, and hands back the command serving the folder, or one line
saying why nothing was written. That command replaces the engine's box, so Copy and Save as
shell script… give it. What cannot be written (a head the engine cannot carry, a folder that
is a file, holds another checkpoint or cannot be written) is one line under the controls; the
folder field, the commands shown and the folder's files stay as they were.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeAlias

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QGuiApplication
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from specdec_core.serve import ServeCommand, write_script

ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang"}
HEAD_HELP = (
    "vLLM loads an EAGLE-1 head only without an fc bias and without a reduced draft "
    "vocabulary; SGLang takes both. For a head vLLM loads, train one with Layout eagle3 in "
    "the Train tab (specdec train eagle --arch eagle3)."
)


HeadDone: TypeAlias = Callable[[ServeCommand | str], None]


class HeadWriter(Protocol):
    def __call__(self, engine: str, folder: Path, done: HeadDone) -> None:
        """Start writing the head into `folder` as `engine` loads it, off the GUI thread;
        later call `done`, on the GUI thread, with the command that serves the folder or the
        one line saying why nothing was written (what cannot be carried and what to do)."""
        ...


@dataclass(frozen=True)
class HeadExportSource:
    """The head the current setting drafts with, and how to write it for an engine."""

    head: str  # its spec, as the Models panel names it ("embedded", a folder, a hub id)
    write: HeadWriter


class ServerExportDialog(QDialog):
    def __init__(
        self,
        commands: dict[str, ServeCommand | str],
        parent: QWidget | None = None,
        head: HeadExportSource | str | None = None,
    ) -> None:
        """`commands`: engine -> its command, or the reason there is none. `head`: the head
        to write for a server, or why this setting has none (None: no head section)."""
        super().__init__(parent)
        self.setWindowTitle("Export to server")
        self.commands = dict(commands)
        self.texts: dict[str, QPlainTextEdit] = {}
        self.boxes: dict[str, QGroupBox] = {}
        self._notes: dict[str, QLabel] = {}
        self._buttons: dict[str, tuple[QPushButton, QPushButton]] = {}
        self.status = QLabel("")
        self.head_source = head
        layout = QVBoxLayout(self)
        for engine, command in commands.items():
            layout.addWidget(self._box(engine))
            self._show(engine, command)
        if head is not None:
            layout.addWidget(self._head_box(head))
        layout.addWidget(self.status)
        close = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        close.rejected.connect(self.reject)
        layout.addWidget(close)
        self.resize(900, 620 if head is not None else 520)

    # -- the engines' commands ------------------------------------------------------------------
    def _box(self, engine: str) -> QGroupBox:
        box = QGroupBox(ENGINE_NAMES.get(engine, engine))
        text = QPlainTextEdit()
        text.setReadOnly(True)
        text.setFont(QFont("monospace"))
        text.setMaximumHeight(90)
        notes = QLabel("")
        notes.setWordWrap(True)
        notes.setStyleSheet("color: #555")
        copy = QPushButton("Copy")
        save = QPushButton("Save as shell script…")
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
        self.boxes[engine] = box
        self.texts[engine] = text
        self._notes[engine] = notes
        self._buttons[engine] = (copy, save)
        return box

    def _show(self, engine: str, command: ServeCommand | str) -> None:
        self.commands[engine] = command
        served = isinstance(command, ServeCommand)
        self.texts[engine].setPlainText(command.command if served else command)
        self._notes[engine].setText(
            "\n".join(f"• {note}" for note in command.notes) if served else ""
        )
        for button in self._buttons[engine]:
            button.setEnabled(served)

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

    # -- the head -------------------------------------------------------------------------------
    def _head_box(self, head: HeadExportSource | str) -> QGroupBox:
        title = "EAGLE head for the server"
        if isinstance(head, HeadExportSource):
            title += f": {head.head}"
        box = QGroupBox(title)
        self.head_engine = QComboBox()
        for engine in self.commands:
            self.head_engine.addItem(ENGINE_NAMES.get(engine, engine), engine)
        self.head_engine.setToolTip("the engine whose loader the head is written for")
        self.head_folder = QLineEdit()
        self.head_folder.setPlaceholderText("a new or empty folder for the head's files")
        self.head_folder.setToolTip(
            "the head is written here (config.json, model.safetensors and, for SGLang with a "
            "reduced vocabulary, hot_ids.pt); copy the folder to the serving machine"
        )
        choose = QPushButton("Choose…")
        choose.setToolTip("choose the folder to write the head into")
        choose.clicked.connect(self._choose_folder)
        self.write_button = QPushButton("Write head")
        self.write_button.setToolTip(
            "write the head as the engine loads it; the engine's command above then serves it"
        )
        self.write_button.clicked.connect(self.write_head)
        folder_row = QHBoxLayout()
        folder_row.addWidget(self.head_folder, 1)
        folder_row.addWidget(choose)
        folder_row.addWidget(self.write_button)
        self.head_status = QLabel("")
        self.head_status.setWordWrap(True)
        self.head_status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        help_line = QLabel(HEAD_HELP)
        help_line.setWordWrap(True)
        help_line.setStyleSheet("color: #555")
        form = QFormLayout(box)
        form.addRow("Engine", self.head_engine)
        form.addRow("Folder", folder_row)
        form.addRow(self.head_status)
        form.addRow(help_line)
        if isinstance(head, str):  # this setting drafts without a head
            for widget in (self.head_engine, self.head_folder, choose, self.write_button):
                widget.setEnabled(False)
            self.head_status.setText(head)
        return box

    def _choose_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Folder for the head", "")
        if folder:
            self.head_folder.setText(folder)

    def write_head(self) -> bool:
        """Start writing the head for the chosen engine into the folder (its command then
        replaces the engine's box). False, with one line saying why, when it cannot start."""
        source = self.head_source
        if not isinstance(source, HeadExportSource) or not self.write_button.isEnabled():
            return False
        engine = self.head_engine.currentData()
        text = self.head_folder.text().strip()
        if not text:
            return self._head_failed("choose a folder for the head first (Choose… or type a path)")
        folder = Path(text).expanduser().absolute()
        problem = folder_problem(folder)
        if problem:
            return self._head_failed(problem)
        self.write_button.setEnabled(False)
        self.head_status.setStyleSheet("")
        name = ENGINE_NAMES.get(engine, engine)
        self.head_status.setText(f"writing the head for {name} into {folder}…")
        source.write(engine, folder, lambda result: self.head_done(engine, folder, result))
        return True

    def head_done(self, engine: str, folder: Path, result: ServeCommand | str) -> None:
        """The writing ended: show the command serving `folder`, or why nothing was written."""
        self.write_button.setEnabled(True)
        if not isinstance(result, ServeCommand):
            self._head_failed(one_line(result))
            return
        self._show(engine, result)
        name = ENGINE_NAMES.get(engine, engine)
        self.boxes[engine].setTitle(f"{name}: serving the head written to {folder}")
        written = ", ".join(sorted(p.name for p in folder.iterdir())) if folder.is_dir() else ""
        self.head_status.setStyleSheet("")
        self.head_status.setText(
            f"wrote {written} to {folder}; the {name} command above serves it "
            "(copy the folder to the serving machine, to the same path)"
        )

    def _head_failed(self, message: str) -> bool:
        self.head_status.setStyleSheet("color: #c1121f")
        self.head_status.setText(message)
        return False


def folder_problem(folder: Path) -> str:
    """Why the head cannot be written into `folder`, checked without writing ('' when it
    can be tried): a file in its place or above it, or a folder this user cannot write."""
    if folder.exists() and not folder.is_dir():
        return f"{folder} is a file; choose a new or empty folder for the head"
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file, so {folder} cannot be made; choose another folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"cannot write into {existing} (no permission); choose a folder you can write to"
    return ""


def one_line(message: str) -> str:
    """An error's first line (a message is one line; a traceback is not shown here)."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    return lines[0] if lines else "the head could not be written"
