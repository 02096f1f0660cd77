"""File ▸ Export to server…: the vLLM and SGLang commands that serve the current setting, and
the EAGLE head written as the chosen engine loads it.

One box per engine: the command (or why this setting cannot be served; as tall as its
wrapped lines, up to `COMMAND_LINES`, then it scrolls), its notes (a scrolling area that takes
all the height the rest leaves: however many there are, none is cut off), Copy (to the
clipboard) and Save as shell script… (an executable `#!/usr/bin/env bash` file,
`specdec_core.serving.serve.write_script`). The commands are built by the caller
(`app/server_controller.py`); the dialog shows only commands that serve what is selected:

- an EAGLE-1 head vLLM cannot load as it stands (a non-zero fc bias, a reduced draft
  vocabulary: the rules of `specdec_core.serving.head_export`, checked here from the safetensors
  files without torch, `vllm_refusal`) gets, in vLLM's box, the one line saying so and what
  to do, as soon as the dialog opens; choosing vLLM for Write head says it again, and the
  head engine starts on one that takes the head;
- an EAGLE-1 head with a reduced draft vocabulary (d2t) and no SGLang token map beside it (the
  bundled head) would be drafted by SGLang over the full vocabulary as it stands: SGLang's box
  shows no command for it, only the one line saying to write the head for SGLang below
  (`sglang_unwritten`), and Write head then puts the command serving the written folder there;
- vLLM's `num_speculative_tokens` is never shown as null: a tree sized "auto" has no depth to
  export, so it is the Decoding panel's k (`config`), with a note; without `config` the box
  says to set the tree's size instead.

In vLLM's box, Check with vLLM here serves the setting on this machine with vLLM from the
serving environment (`./playground serving-env`) and checks it against the playground on the
window's prompt (`specdec serve-check`'s check: the caller passes a `ServeChecker` that runs it
in the engine process); while it runs the button stops it, its progress is the status line,
and its table (same output as `ar` or the first difference and its cause, τ and tokens/s on
both sides) then shows under the box; what went wrong is one line there.

Below, for a method that drafts with an EAGLE head: the engine (vLLM / SGLang), a folder and
Write head. Writing the head reads and rewrites its weights, which needs torch, and the
window's process never imports torch: the caller passes a `HeadWriter` that starts the writing
in the engine process (`specdec_core.serving.head_export.export_head`, then `serve_command` on the
folder), off the GUI thread, and hands back the command serving the folder, or one line
saying why nothing was written. That command replaces the engine's box, so Copy and Save as
shell script… give it. What cannot be written (a head the engine cannot carry, a folder that
is a file, holds another checkpoint or cannot be written) is one line under the controls; the
folder field, the commands shown and the folder's files stay as they were.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol, TypeAlias

import numpy as np
from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QFont, QFontMetrics, QGuiApplication, QResizeEvent, QTextLayout
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QFrame,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)
from safetensors import SafetensorError, safe_open

from specdec_core.decoding.config import DecodeConfig
from specdec_core.errors import SpecdecError
from specdec_core.heads.eagle.layouts import TOKEN_MAP
from specdec_core.resources import bundled_head, names_bundled_head
from specdec_core.serving.export import head_format
from specdec_core.serving.serve import ServeCommand, write_script
from specdec_core.serving.serving_check import ServeCheck

ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang"}
HEAD_HELP = (
    "vLLM loads an EAGLE-1 head only without an fc bias and without a reduced draft "
    "vocabulary; SGLang takes both. For a head vLLM loads, train one with Layout eagle3 in "
    "the Train tab (specdec train eagle --arch eagle3)."
)
NO_DRAFT_LENGTH = (
    "cannot serve this setting: vLLM drafts a chain of num_speculative_tokens, and the tree "
    "size is auto here; set Tree depth, Tree top-k and Tree size in the Decoding panel"
)
NOTES_LINES = 4  # the notes area's least height in lines; it takes the spare height, more scroll
COMMAND_LINES = 6  # the most lines a command's box grows to; a longer one scrolls
SLACK = 4  # pixels below a command's last line (the box lays lines out a little taller)
SIZE = QSize(900, 760)  # the dialog's size where the screen has room (less where it has not)
SCREEN_MARGIN = 60  # left free of the screen's height: the window manager's frame and title


class CommandText(QPlainTextEdit):
    """A read-only command in monospace, as tall as its lines wrapped at the box's width (at
    most `COMMAND_LINES`, then it scrolls): the dialog's spare height goes to the notes."""

    def __init__(self) -> None:
        super().__init__()
        self.setReadOnly(True)
        self.setFont(QFont("monospace"))
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self._heights: list[float] = self._line_heights(self.width())
        self.textChanged.connect(self._refit)

    def wrapped_lines(self, width: int) -> int:
        """Lines the text takes in a box `width` pixels wide."""
        return len(self._line_heights(width))

    def _line_heights(self, width: int) -> list[float]:
        """The heights of the lines of the text in a box `width` pixels wide, laid out as the
        box lays it out (its wrap mode, its font, the document's margins)."""
        room = width - 2 * self.frameWidth() - 2 * self.document().documentMargin()
        option = self.document().defaultTextOption()
        heights: list[float] = []
        block = self.document().firstBlock()
        while block.isValid():
            layout = QTextLayout(block.text(), self.font())
            layout.setTextOption(option)
            layout.beginLayout()
            while (line := layout.createLine()).isValid():
                line.setLineWidth(max(1.0, room))
                line.setLeadingIncluded(True)  # as the box lays its lines out
                heights.append(line.height())
            layout.endLayout()
            block = block.next()
        return heights or [float(QFontMetrics(self.font()).height())]

    def sizeHint(self) -> QSize:
        shown = math.ceil(sum(self._heights[:COMMAND_LINES]))
        margins = 2 * self.frameWidth() + 2 * round(self.document().documentMargin())
        return QSize(super().sizeHint().width(), shown + margins + SLACK)

    def minimumSizeHint(self) -> QSize:  # a scroll area's own minimum is taller than a line
        return QSize(super().minimumSizeHint().width(), self.sizeHint().height())

    def _refit(self) -> None:
        heights = self._line_heights(self.width())
        if heights != self._heights:
            self._heights = heights
            fits = len(heights) <= COMMAND_LINES  # no scroll bar beside a command shown whole
            self.setVerticalScrollBarPolicy(
                Qt.ScrollBarPolicy.ScrollBarAlwaysOff
                if fits
                else Qt.ScrollBarPolicy.ScrollBarAsNeeded
            )
            self.updateGeometry()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._refit()


HeadDone: TypeAlias = Callable[[ServeCommand | str], None]


CheckDone: TypeAlias = Callable[[ServeCheck | str], None]
CHECK = "Check with vLLM here"
CHECK_HELP = (
    "serve this setting with vLLM on this machine (from the serving environment: "
    "./playground serving-env) and check it against the playground on the prompt in the "
    "window: the same output as ar, tau and tokens/s on both sides (minutes: vLLM's start)"
)


class ServeChecker(Protocol):
    """Runs the serving check off the GUI thread."""

    def start(self, progress: Callable[[str], None], done: CheckDone) -> bool:
        """Start the check; `progress` hears its status lines and `done`, once, the result
        or the one line saying why there is none (at once, and False, when it cannot start)."""
        ...

    def stop(self) -> None:
        """Stop a check under way (its engine is stopped with it)."""
        ...


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
        config: DecodeConfig | None = None,
        checker: ServeChecker | None = None,
    ) -> None:
        """`commands`: engine -> its command, or the reason there is none. `head`: the head
        to write for a server, or why this setting has none (None: no head section).
        `config`: the decoding settings the commands serve (its k fills a draft length the
        commands leave to the engine). `checker`: runs Check with vLLM here (None: no such
        button)."""
        super().__init__(parent)
        self.setWindowTitle("Export to server")
        self.commands = dict(commands)
        self.config = config
        self.texts: dict[str, CommandText] = {}
        self.notes: dict[str, QPlainTextEdit] = {}
        self.boxes: dict[str, QGroupBox] = {}
        self.buttons: dict[str, tuple[QPushButton, QPushButton]] = {}
        self.status = QLabel("")
        self.head_source = head
        self.checker = checker
        self.checking = False
        self.check_result: ServeCheck | str | None = None
        folder = head_folder(head.head) if isinstance(head, HeadExportSource) else None
        self.refusals = {"vllm": vllm_refusal(folder) if folder is not None else ""}
        # engines that serve the head once it is written for them (not as it stands)
        self.unwritten = {"sglang": sglang_unwritten(folder) if folder is not None else ""}
        layout = self._layout = QVBoxLayout(self)
        for engine, command in commands.items():
            layout.addWidget(self._box(engine))
            self._show(engine, command)
        if head is not None:
            layout.addWidget(self._head_box(head))
        layout.addWidget(self.status)
        close = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        close.rejected.connect(self.reject)
        layout.addWidget(close)
        self.resize(fitted_size(self))

    # -- the engines' commands ------------------------------------------------------------------
    def _box(self, engine: str) -> QGroupBox:
        box = QGroupBox(ENGINE_NAMES.get(engine, engine))
        text = CommandText()
        notes = QPlainTextEdit()  # takes the spare height and scrolls: no note is cut off
        notes.setReadOnly(True)
        notes.setFrameShape(QFrame.Shape.NoFrame)
        notes.setStyleSheet("QPlainTextEdit { color: #555; background: transparent; }")
        lines = notes.fontMetrics().lineSpacing()
        notes.setMinimumHeight(NOTES_LINES * lines + 2 * notes.frameWidth() + 8)
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
        layout.addWidget(notes, 1)
        layout.addLayout(buttons)
        if engine == "vllm" and self.checker is not None:
            self.check_button = QPushButton(CHECK)
            self.check_button.setToolTip(CHECK_HELP)
            self.check_button.clicked.connect(self._check_clicked)
            buttons.insertWidget(0, self.check_button)
            self.check_table = QPlainTextEdit()  # the check's table: monospace, scrolls
            self.check_table.setReadOnly(True)
            self.check_table.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
            self.check_table.setFont(QFont("monospace"))
            self.check_table.setVisible(False)
            self.check_status = QLabel("")
            self.check_status.setWordWrap(True)
            self.check_status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            layout.addWidget(self.check_status)
            layout.addWidget(self.check_table, 1)
        self.boxes[engine] = box
        self.texts[engine] = text
        self.notes[engine] = notes
        self.buttons[engine] = (copy, save)
        return box

    def _show(self, engine: str, command: ServeCommand | str) -> None:
        """Show `command`, or instead why it would not serve what is selected."""
        command = self._vetted(engine, command)
        self.commands[engine] = command
        served = isinstance(command, ServeCommand)
        self.texts[engine].setPlainText(command.command if served else command)
        notes = "\n".join(f"• {note}" for note in command.notes) if served else ""
        self.notes[engine].setPlainText(notes)
        self.notes[engine].setVisible(bool(notes))  # the space goes to the boxes with notes
        self._layout.setStretchFactor(self.boxes[engine], 1 if notes else 0)
        for button in self.buttons[engine]:
            button.setEnabled(served)
        if engine == "vllm" and self.checker is not None and not self.checking:
            self.check_button.setEnabled(served)

    def _vetted(self, engine: str, command: ServeCommand | str) -> ServeCommand | str:
        if not isinstance(command, ServeCommand):
            return command
        if self.refusals.get(engine):
            return self.refusals[engine]
        if self.unwritten.get(engine):
            return self.unwritten[engine]
        return with_draft_length(command, self.config.k if self.config is not None else None)

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

    # -- the serving check ----------------------------------------------------------------------
    def reject(self) -> None:
        """Close (Esc, Close, the title bar's ×): a check under way stops with its engine."""
        self.stop_check()
        super().reject()

    def _check_clicked(self) -> None:
        if self.checking:
            self.stop_check()
        else:
            self.check()

    def check(self) -> bool:
        """Start Check with vLLM here; False (with its line) when it cannot start."""
        if self.checker is None or self.checking:
            return False
        if not isinstance(self.commands.get("vllm"), ServeCommand):
            return False
        self.checking, self.check_result = True, None
        self.check_button.setText("Stop check")
        self.check_button.setToolTip("stop the check and the vLLM it started")
        self.check_status.setStyleSheet("")
        self.check_status.setText("checking with vLLM…")
        started = self.checker.start(self._check_progress, self.check_done)
        return started and self.checking

    def stop_check(self) -> None:
        if self.checker is not None and self.checking:
            self.checker.stop()
            self.check_status.setText("stopping the check and its vLLM…")

    def _check_progress(self, message: str) -> None:
        if self.checking:
            self.check_status.setText(message)

    def check_done(self, result: ServeCheck | str) -> None:
        """The check ended: its table, or the one line saying why there is none."""
        self.checking = False
        self.check_result = result
        self.check_button.setText(CHECK)
        self.check_button.setToolTip(CHECK_HELP)
        self.check_button.setEnabled(isinstance(self.commands.get("vllm"), ServeCommand))
        if isinstance(result, ServeCheck):
            same = sum(row.identical for row in result.rows)
            self.check_status.setStyleSheet("" if result.identical else "color: #c1121f")
            self.check_status.setText(
                f"vLLM served it: {same}/{len(result.rows)} identical to the playground's ar; "
                f"engine log {result.log_path}"
            )
            notes = "".join(f"\n# {note}" for note in result.notes)
            self.check_table.setPlainText(result.table() + notes)
            self.check_table.setVisible(True)
            self._layout.setStretchFactor(self.boxes["vllm"], 1)
        else:
            self.check_status.setStyleSheet("color: #c1121f")
            self.check_status.setText(one_line(result))

    # -- the head -------------------------------------------------------------------------------
    def _head_box(self, head: HeadExportSource | str) -> QGroupBox:
        title = "EAGLE head for the server"
        if isinstance(head, HeadExportSource):
            title += f": {head.head}"
        box = QGroupBox(title)
        self.head_engine = QComboBox()
        for engine in self.commands:
            self.head_engine.addItem(ENGINE_NAMES.get(engine, engine), engine)
        takes = [e for e in self.commands if not self.refusals.get(e)]
        if takes:  # start on an engine that loads the head
            self.head_engine.setCurrentIndex(self.head_engine.findData(takes[0]))
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
        else:
            self.head_engine.currentIndexChanged.connect(self._head_engine_changed)
            self._head_engine_changed()
        return box

    def _head_engine_changed(self) -> None:
        """Say at once when the chosen engine cannot load the head as it stands."""
        refusal = self.refusals.get(self.head_engine.currentData(), "")
        if refusal:
            self._head_failed(refusal)
        elif self.head_status.text() in self.refusals.values():
            self.head_status.setText("")

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
        if self.refusals.get(engine):
            return self._head_failed(self.refusals[engine])
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
        self.unwritten[engine] = ""  # written for it: its command serves the folder
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


def fitted_size(dialog: QDialog) -> QSize:
    """`SIZE`, or less where the dialog's screen (its parent's) has less room."""
    parent = dialog.parentWidget()
    screen = (parent or dialog).screen() or QGuiApplication.primaryScreen()
    room = screen.availableGeometry().size() - QSize(SCREEN_MARGIN // 3, SCREEN_MARGIN)
    return SIZE.boundedTo(room).expandedTo(dialog.minimumSizeHint())


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


def with_draft_length(command: ServeCommand, k: int | None) -> ServeCommand | str:
    """`command` with vLLM's `num_speculative_tokens` set where it was left null (a tree sized
    "auto" has no depth to export): to `k`, with a note; without `k`, why it cannot be
    served. Any other command as it is."""
    argv = list(command.argv)
    if "--speculative-config" not in argv[:-1]:
        return command
    at = argv.index("--speculative-config") + 1
    spec = json.loads(argv[at])
    if spec.get("num_speculative_tokens", 0) is not None:
        return command
    if k is None:
        return NO_DRAFT_LENGTH
    argv[at] = json.dumps({**spec, "num_speculative_tokens": k})
    note = (
        f"num_speculative_tokens is {k}, the Decoding panel's k: the tree size is auto here "
        "and vLLM drafts a chain; set Tree depth, Tree top-k and Tree size to export a tree's "
        "depth instead"
    )
    return replace(command, argv=tuple(argv), notes=[note, *command.notes])


def head_folder(spec: str) -> Path | None:
    """The local folder of the head `spec` (a bundled head's name or a folder); None for a
    hub id (not looked into offline) or a bundled head this install lacks."""
    if names_bundled_head(spec):
        try:
            return bundled_head(spec)
        except SpecdecError:
            return None
    folder = Path(spec).expanduser()
    return folder if folder.is_dir() else None


def vllm_refusal(folder: Path) -> str:
    """Why vLLM cannot load the EAGLE-1 head in `folder` as it stands, '' when it can (or the
    folder is not a head read here; writing it says why). The rule of
    `specdec_core.serving.head_export` (its vLLM EAGLE-1 export): vLLM's EAGLE-1 loader has an fc
    without bias and drafts over the target's full vocabulary, so a non-zero fc bias or a
    reduced draft vocabulary (d2t) cannot be carried; read from the safetensors files (their
    headers, and the bias's bytes), without torch."""
    try:
        if head_format(str(folder)) != "eagle":
            return ""
        lost = []
        for weights in sorted(folder.glob("*.safetensors")):
            with safe_open(str(weights), framework="np") as handle:
                keys = set(handle.keys())
                if "fc.bias" in keys and _nonzero(weights, "fc.bias"):
                    lost.insert(0, "an fc bias")
                if "d2t" in keys:
                    vocab = handle.get_slice("d2t").get_shape()[0]
                    lost.append(f"a draft vocabulary of {vocab} tokens")
    except (SpecdecError, SafetensorError, OSError, ValueError, KeyError):
        return ""
    if not lost:
        return ""
    return (
        "vLLM cannot serve this EAGLE-1 head as it stands: its EAGLE-1 loader (llama_eagle.py) "
        "has an fc without bias and drafts over the target's full vocabulary, and this head "
        f"has {' and '.join(lost)}; serve it with SGLang (write the head for SGLang below), or "
        "train an EAGLE-3 head, which vLLM loads (Train tab, Layout eagle3; specdec train "
        "eagle --arch eagle3)"
    )


def sglang_unwritten(folder: Path) -> str:
    """Why SGLang's command cannot serve the EAGLE-1 head in `folder` as it stands, '' when it
    can: a reduced draft vocabulary (d2t) with no SGLang token map beside it, which SGLang's
    EAGLE-1 loader ignores (it would draft over the full vocabulary); written for SGLang
    (`specdec_core.serving.head_export`), the head has its token map. Read from the
    safetensors headers, without torch."""
    try:
        if head_format(str(folder)) != "eagle" or (folder / TOKEN_MAP).is_file():
            return ""
        vocab = 0
        for weights in sorted(folder.glob("*.safetensors")):
            with safe_open(str(weights), framework="np") as handle:
                if "d2t" in set(handle.keys()):
                    vocab = handle.get_slice("d2t").get_shape()[0]
    except (SpecdecError, SafetensorError, OSError, ValueError, KeyError):
        return ""
    if not vocab:
        return ""
    return (
        f"write the head for SGLang below first (Write head): this EAGLE-1 head drafts over a "
        f"reduced vocabulary of {vocab} tokens, which SGLang's EAGLE-1 loader ignores as it "
        "stands (it would draft over the full vocabulary); written, it has the token map "
        "SGLang takes, and the command serving that folder shows here"
    )


def _nonzero(weights: Path, key: str) -> bool:
    """Has tensor `key` of a safetensors file a value other than ±0? Read from its bytes, so
    that bfloat16 (which numpy lacks) is read as well: a float is ±0 when every bit but the
    sign is clear."""
    with weights.open("rb") as file:
        size = int.from_bytes(file.read(8), "little")
        entry = json.loads(file.read(size))[key]
        start, end = entry["data_offsets"]
        file.seek(8 + size + start)
        raw = file.read(end - start)
    width = {"F16": 2, "BF16": 2, "F32": 4, "F64": 8}[entry["dtype"]]
    values = np.frombuffer(raw, dtype=f"<u{width}")
    magnitude = np.array((1 << (8 * width - 1)) - 1, dtype=values.dtype)
    return bool((values & magnitude).any())
