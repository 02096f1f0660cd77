"""The window's saved settings (`GuiSettings`, app/settings.py) and the panels they come from.

Read when the window opens and applied to the panels once; gathered from them and written at
each Generate and Compare, when the Server tab starts polling, and when the window closes. The
Models and Decoding panels take and give their values by field name (`values()` / `apply()`),
which `GuiSettings.merged` checks like the file's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

from PySide6.QtCore import QByteArray
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QCheckBox, QMainWindow, QSplitter, QStatusBar

from app import history, screen
from app.settings import GuiSettings, load_settings, save_settings
from app.widgets.chat_view import ChatView
from app.widgets.compare_panel import ComparePanel
from app.widgets.decoding_panel import DecodingPanel
from app.widgets.models_panel import ModelsPanel
from app.widgets.prompt_panel import PromptPanel

NOTE_MS = 15_000


class WindowSettings:
    def __init__(
        self,
        path: Path,
        window: QMainWindow,
        splitter: QSplitter,
        models: ModelsPanel,
        decoding: DecodingPanel,
        compare: ComparePanel,
        prompt: PromptPanel,
        show_rejected: QCheckBox,
        chat: tuple[Callable[[], bool], Callable[[], None]],
        server_url: Callable[[], str],
        bar: QStatusBar,
        measure_speedup: QAction | None = None,
        chat_view: ChatView | None = None,
    ) -> None:
        """`chat`: is the Chat tab open, and bring it to the front; `server_url()`: the
        Server tab's URL; `measure_speedup`: Run ▸ Measure the speedup; `chat_view`: the
        chat's system prompt and reply cap."""
        self.path = path
        self.first_run = not path.exists()  # a new user: nothing saved yet
        self.saved, self.note = load_settings(path)
        self.window, self.splitter, self.bar = window, splitter, bar
        self.models, self.decoding, self.compare, self.prompt = models, decoding, compare, prompt
        self.show_rejected, self.server_url = show_rejected, server_url
        self.in_chat, self.show_chat = chat
        self.measure_speedup = measure_speedup
        self.chat_view = chat_view

    def apply(self) -> None:
        saved = self.saved
        by_name = asdict(saved)  # the panels read their own fields
        self.models.apply(by_name)
        self.decoding.apply(by_name)
        if self.chat_view is not None:
            self.chat_view.apply(by_name)
        self.compare.set_selected(list(saved.compare_methods))
        self.prompt.set_text(saved.prompt)
        self.prompt.raw.setChecked(saved.raw)
        self.show_rejected.setChecked(saved.show_rejected)
        if self.measure_speedup is not None:
            self.measure_speedup.setChecked(saved.measure_speedup)
        if saved.chat_mode:
            self.show_chat()
        if saved.geometry:
            self.window.restoreGeometry(QByteArray.fromHex(saved.geometry.encode()))
        else:  # fresh settings: no larger than the screen
            screen.place(self.window)
        if saved.splitter:
            self.splitter.restoreState(QByteArray.fromHex(saved.splitter.encode()))
        notes = [note for note in (self.note, history.check()) if note]
        if notes:
            self.bar.showMessage("; ".join(notes), NOTE_MS)

    def current(self) -> GuiSettings:
        chat = self.chat_view.values() if self.chat_view is not None else {}
        panels = self.saved.merged({**self.models.values(), **self.decoding.values(), **chat})
        return replace(
            panels,
            compare_methods=tuple(self.compare.chosen()),
            prompt=self.prompt.text(),
            raw=self.prompt.raw.isChecked(),
            show_rejected=self.show_rejected.isChecked(),
            measure_speedup=(
                self.measure_speedup.isChecked()
                if self.measure_speedup is not None
                else self.saved.measure_speedup
            ),
            chat_mode=self.in_chat(),
            geometry=bytes(self.window.saveGeometry().toHex()).decode(),
            splitter=bytes(self.splitter.saveState().toHex()).decode(),
            server_url=self.server_url(),
        )

    def save(self) -> None:
        try:
            save_settings(self.current(), self.path)
        except OSError as error:
            self.bar.showMessage(f"could not save settings: {error}", 10_000)
