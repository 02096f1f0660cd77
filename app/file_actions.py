"""File ▸ Open prompt… and the exports: the last comparison as CSV or JSON (app/export.py)
and the window as PNG, each through a file dialog."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QStatusBar, QWidget

from app.export import write_csv, write_json
from app.session import Session
from app.widgets.compare_panel import ComparePanel
from app.widgets.prompt_panel import PromptPanel

NO_COMPARISON = "run a comparison first (Run ▸ Compare methods)"


class FileActions:
    def __init__(
        self,
        window: QWidget,
        session: Session,
        prompt: PromptPanel,
        compare: ComparePanel,
        bar: QStatusBar,
    ) -> None:
        self.window, self.session, self.prompt, self.compare, self.bar = (
            window,
            session,
            prompt,
            compare,
            bar,
        )

    def open_prompt(self) -> None:
        kinds = "Text (*.txt *.md);;All (*)"
        path, _ = QFileDialog.getOpenFileName(self.window, "Prompt file", "", kinds)
        if path:
            self.prompt.set_text(Path(path).read_text(encoding="utf-8", errors="replace"))

    def export_dialog(self, kind: str) -> None:
        """`kind`: csv or json (the comparison), png (the window)."""
        if kind != "png" and not self.compare.results:
            self.session.report(NO_COMPARISON)
            return
        name = kind.upper()
        path, _ = QFileDialog.getSaveFileName(
            self.window, f"Export {name}", f"comparison.{kind}", f"{name} (*.{kind})"
        )
        if path:
            self.export(kind, Path(path))

    def export(self, kind: str, path: Path) -> None:
        if kind == "csv":
            write_csv(self.compare.results, path)
        elif kind == "json":
            write_json(self.compare.results, path, prompt=self.prompt.text())
        else:
            self.window.grab().save(str(path))
        self.bar.showMessage(f"exported {path}", 5000)
