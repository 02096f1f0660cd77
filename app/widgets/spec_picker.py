"""A model spec picker: editable combo (presets, recent, hub id) plus Browse… (folder or .gguf)."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QComboBox, QFileDialog, QHBoxLayout, QMenu, QPushButton, QWidget

MAX_RECENT = 8


class SpecPicker(QWidget):
    changed = Signal(str)

    def __init__(
        self, presets: dict[str, str], parent: QWidget | None = None
    ) -> None:  # presets: spec -> description
        super().__init__(parent)
        self._presets = dict(presets)
        self._recent: list[str] = []
        self.combo = QComboBox()
        self.combo.setEditable(True)
        self.combo.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        self.combo.setMinimumContentsLength(12)
        self.combo.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
        )
        self.combo.lineEdit().setPlaceholderText("embedded, hub id, folder or .gguf")
        self.combo.currentTextChanged.connect(self.changed)
        browse = QPushButton("Browse…")
        browse.setToolTip("Pick a model folder or a .gguf file")
        menu = QMenu(browse)
        menu.addAction("Model folder…", self._browse_folder)
        menu.addAction("GGUF file…", self._browse_gguf)
        browse.setMenu(menu)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.combo, 1)
        layout.addWidget(browse)
        self._rebuild("")

    def spec(self) -> str:
        return self.combo.currentText().strip()

    def set_spec(self, spec: str) -> None:
        self.combo.setCurrentText(spec)

    def recent(self) -> list[str]:
        return list(self._recent)

    def set_recent(self, recent: list[str]) -> None:
        self._recent = [s for s in recent if isinstance(s, str) and s][:MAX_RECENT]
        self._rebuild(self.spec())

    def remember(self, spec: str) -> None:
        """Put a successfully used spec at the top of the recent list."""
        if spec and spec not in self._presets:
            self._recent = [spec, *[s for s in self._recent if s != spec]][:MAX_RECENT]
            self._rebuild(spec)

    def _rebuild(self, current: str) -> None:
        self.combo.blockSignals(True)
        self.combo.clear()
        for spec, description in self._presets.items():
            self.combo.addItem(spec)
            self.combo.setItemData(self.combo.count() - 1, description, Qt.ItemDataRole.ToolTipRole)
        for spec in self._recent:
            self.combo.addItem(spec)
            self.combo.setItemData(self.combo.count() - 1, "recent", Qt.ItemDataRole.ToolTipRole)
        self.combo.setCurrentText(current)
        self.combo.blockSignals(False)

    def _browse_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Model folder (with config.json)")
        if folder:
            self.set_spec(folder)

    def _browse_gguf(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "GGUF model file", "", "GGUF (*.gguf)")
        if path:
            self.set_spec(path)
