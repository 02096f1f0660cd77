"""Actions and menus of the main window (File, Run, View, Help), with their shortcuts."""

from __future__ import annotations

import platform
from dataclasses import dataclass
from importlib import metadata

from PySide6.QtCore import qVersion
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMainWindow, QMessageBox

DISTRIBUTIONS = (
    "specdec-playground",
    "PySide6-Essentials",
    "pyqtgraph",
    "superqt",
    "torch",
    "transformers",
)


@dataclass
class Actions:
    load: QAction
    open_prompt: QAction
    export_csv: QAction
    export_json: QAction
    export_png: QAction
    export_server: QAction
    quit: QAction
    generate: QAction
    stop: QAction
    compare: QAction
    show_rejected: QAction
    output_tab: QAction
    compare_tab: QAction
    clear: QAction
    about: QAction


def _action(window: QMainWindow, text: str, shortcut: str | QKeySequence | None = None) -> QAction:
    action = QAction(text, window)
    if shortcut is not None:
        action.setShortcut(QKeySequence(shortcut))
    window.addAction(action)  # shortcuts work even when the menu bar is hidden
    return action


def create_actions(window: QMainWindow) -> Actions:
    actions = Actions(
        load=_action(window, "&Load target model", "Ctrl+L"),
        open_prompt=_action(window, "&Open prompt…", QKeySequence.StandardKey.Open),
        export_csv=_action(window, "Export comparison as &CSV…"),
        export_json=_action(window, "Export comparison as &JSON…"),
        export_png=_action(window, "Export window as &PNG…"),
        export_server=_action(window, "Export to &server…"),
        quit=_action(window, "&Quit", QKeySequence.StandardKey.Quit),
        generate=_action(window, "&Generate", "Ctrl+Return"),
        stop=_action(window, "&Stop", "Esc"),
        compare=_action(window, "&Compare methods", "Ctrl+Shift+Return"),
        show_rejected=_action(window, "Show &rejected drafts"),
        output_tab=_action(window, "&Output", "Ctrl+1"),
        compare_tab=_action(window, "Co&mpare", "Ctrl+2"),
        clear=_action(window, "C&lear output"),
        about=_action(window, "&About specdec-playground"),
    )
    actions.show_rejected.setCheckable(True)
    return actions


def create_menus(window: QMainWindow, actions: Actions) -> None:
    bar = window.menuBar()
    file_menu = bar.addMenu("&File")
    for action in (actions.load, actions.open_prompt):
        file_menu.addAction(action)
    file_menu.addSeparator()
    for action in (actions.export_csv, actions.export_json, actions.export_png):
        file_menu.addAction(action)
    file_menu.addAction(actions.export_server)
    file_menu.addSeparator()
    file_menu.addAction(actions.quit)
    run_menu = bar.addMenu("&Run")
    for action in (actions.generate, actions.stop, actions.compare):
        run_menu.addAction(action)
    view_menu = bar.addMenu("&View")
    for action in (actions.show_rejected, actions.output_tab, actions.compare_tab, actions.clear):
        view_menu.addAction(action)
    help_menu = bar.addMenu("&Help")
    help_menu.addAction(actions.about)


def versions() -> dict[str, str]:
    found = {"Python": platform.python_version(), "Qt": qVersion()}
    for name in DISTRIBUTIONS:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def show_about(window: QMainWindow) -> None:
    rows = "".join(f"<tr><td>{k}</td><td>&nbsp;{v}</td></tr>" for k, v in versions().items())
    QMessageBox.about(
        window,
        "About specdec-playground",
        "<b>specdec-playground</b><br>A playground for speculative decoding: EAGLE heads, "
        f"classic drafts, n-gram lookup, live.<br><br><table>{rows}</table>",
    )
