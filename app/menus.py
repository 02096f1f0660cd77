"""Actions and menus of the main window (File, Run, View, Help), with their shortcuts."""

from __future__ import annotations

import platform
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from PySide6.QtCore import Qt, QUrl, qVersion
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMainWindow, QMenu, QMessageBox

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
    measure_speedup: QAction  # the autoregressive reference of a Generate or chat turn
    show_rejected: QAction
    output_tab: QAction
    compare_tab: QAction
    chat_tab: QAction
    clear: QAction
    help: QAction
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
        export_csv=_action(window, "Export comparison as &CSV…", "Ctrl+E"),
        export_json=_action(window, "Export comparison as &JSON…", "Ctrl+Shift+E"),
        export_png=_action(window, "Export window as &PNG…", "Ctrl+Shift+P"),
        export_server=_action(window, "Export to &server…", "Ctrl+Shift+S"),
        quit=_action(window, "&Quit", "Ctrl+Q"),
        generate=_action(window, "&Generate", "Ctrl+Return"),
        stop=_action(window, "&Stop", "Esc"),
        compare=_action(window, "&Compare methods", "Ctrl+Shift+Return"),
        measure_speedup=_action(window, "&Measure the speedup", "Ctrl+M"),
        show_rejected=_action(window, "Show &rejected drafts", "Ctrl+R"),
        output_tab=_action(window, "&Output", "Ctrl+1"),
        compare_tab=_action(window, "Co&mpare", "Ctrl+2"),
        chat_tab=_action(window, "C&hat", "Ctrl+3"),
        clear=_action(window, "C&lear output", "Ctrl+K"),
        help=_action(window, "&What am I looking at?", QKeySequence.StandardKey.HelpContents),
        about=_action(window, "&About specdec-playground", "Ctrl+F1"),
    )
    actions.show_rejected.setCheckable(True)
    actions.measure_speedup.setCheckable(True)
    actions.measure_speedup.setChecked(True)
    actions.measure_speedup.setToolTip(
        "after a Generate or a chat turn, measure an autoregressive run of the same prompt and "
        "settings in the background (or reuse one measured before on this machine) for the "
        "speedup; off: no reference runs and no speedup is shown"
    )
    return actions


def create_menus(window: QMainWindow, actions: Actions) -> dict[str, QMenu]:
    """File, Run, View and Help, by name (without the & of their shortcut)."""
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
    run_menu.addSeparator()
    run_menu.addAction(actions.measure_speedup)
    view_menu = bar.addMenu("&View")
    view = (actions.show_rejected, actions.output_tab, actions.compare_tab, actions.chat_tab)
    for action in (*view, actions.clear):
        view_menu.addAction(action)
    help_menu = bar.addMenu("&Help")
    help_menu.addAction(actions.help)
    help_menu.addAction(actions.about)
    return {"File": file_menu, "Run": run_menu, "View": view_menu, "Help": help_menu}


def versions() -> dict[str, str]:
    found = {"Python": platform.python_version(), "Qt": qVersion()}
    for name in DISTRIBUTIONS:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


GUIDE = Path(__file__).resolve().parents[1] / "docs" / "window.md"  # in a checkout

HELP_TEXT = """<p><b>Tokens</b> are coloured by who produced them:
<span style="background:#9be3b0">&nbsp;green&nbsp;</span> a drafted token the target accepted,
<span style="background:#ffb199">&nbsp;orange-red&nbsp;</span> a correction (the target's own
token where it rejected the draft),
<span style="background:#9cc8ff">&nbsp;blue&nbsp;</span> a bonus token (the target's extra
token after a fully accepted draft), <span style="background:#e4e4e4">&nbsp;grey&nbsp;</span>
a plain target token (autoregressive). Hover a token for its step and probabilities.</p>
<p><b>τ</b> (mean acceptance length) = new tokens ÷ target forwards: autoregressive decoding
is 1, a step that accepts all k drafts gives k + 1. Speedup is measured: tokens/s against an
autoregressive run of the same prompt and settings, run after the answer while you read (the
next action cancels it) or reused where it was measured before on this machine, as the line
says (Run ▸ Measure the speedup turns it off).</p>
<p><b>Plots</b>: tokens per step with its running mean τ; tokens/s over engine time;
acceptance rate by draft position; for EAGLE-2 the last draft tree, accepted path in green.</p>
<p>More: The playground window (docs/window.md).</p>"""


def help_text() -> str:
    """The help page, linking the window's guide when it is on this machine (a checkout)."""
    if not GUIDE.is_file():
        return HELP_TEXT
    link = QUrl.fromLocalFile(str(GUIDE)).toString()
    return HELP_TEXT.replace(
        "The playground window (docs/window.md)",
        f'<a href="{link}">The playground window</a> (docs/window.md)',
    )


def show_help(window: QMainWindow) -> QMessageBox:
    box = QMessageBox(
        QMessageBox.Icon.Information, "What am I looking at?", help_text(), parent=window
    )
    box.setTextFormat(Qt.TextFormat.RichText)
    box.setTextInteractionFlags(Qt.TextInteractionFlag.TextBrowserInteraction)
    box.open()
    return box


def show_about(window: QMainWindow, log_file: str = "") -> None:
    rows = "".join(f"<tr><td>{k}</td><td>&nbsp;{v}</td></tr>" for k, v in versions().items())
    logs = f"<br>Log file (tracebacks): {log_file}" if log_file else ""
    QMessageBox.about(
        window,
        "About specdec-playground",
        "<b>specdec-playground</b><br>A playground for speculative decoding: EAGLE heads, "
        f"classic drafts, n-gram lookup, live.<br><br><table>{rows}</table>{logs}",
    )
