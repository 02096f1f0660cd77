"""A model spec picker: editable combo (presets, recent, models on this machine, hub id) plus
Browse… (folder or .gguf, or a folder to list models from).

Models on this machine (`set_local`) show their size and kind; those that do not fit the
loaded target are greyed with the reason. Their item text carries the label, so `spec()` maps
it back to the spec. The list is refreshed when the popup opens (`popup_opening`)."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QPalette
from PySide6.QtWidgets import QComboBox, QFileDialog, QHBoxLayout, QMenu, QPushButton, QWidget

MAX_RECENT = 8
SEPARATOR = "   ·   "  # between a spec and its label in the list

# (spec, label e.g. "4.9 GB, causal LM", why it does not fit the target or None)
LocalEntry = tuple[str, str, str | None]


class _Combo(QComboBox):
    popup_opening = Signal()

    def showPopup(self) -> None:  # noqa: N802 (Qt's name)
        self.popup_opening.emit()
        super().showPopup()


class SpecPicker(QWidget):
    changed = Signal(str)
    popup_opening = Signal()  # about to list: a moment to refresh `set_local`
    folder_added = Signal(str)  # "Add a folder to the list…"

    def __init__(
        self, presets: dict[str, str], parent: QWidget | None = None
    ) -> None:  # presets: spec -> description
        super().__init__(parent)
        self._presets = dict(presets)
        self._recent: list[str] = []
        self._local: list[LocalEntry] = []
        self._labels: dict[str, str] = {}  # item text -> spec
        self.combo = _Combo()
        self.combo.popup_opening.connect(self.popup_opening)
        self.combo.activated.connect(self._show_spec)
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
        menu.addAction("Add a folder to the list…", self._add_folder)
        browse.setMenu(menu)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.combo, 1)
        layout.addWidget(browse)
        self._rebuild("")

    def spec(self) -> str:
        text = self.combo.currentText().strip()
        return self._labels.get(text, text)

    def set_local(self, entries: list[LocalEntry]) -> None:
        """Models on this machine (and suggestions) below presets and recent specs."""
        if entries != self._local:
            self._local = list(entries)
            self._rebuild(self.spec())

    def local_items(self) -> list[tuple[str, bool]]:
        """(item text, greyed) of the listed local models, in order."""
        first = self.combo.count() - len(self._local)
        role = Qt.ItemDataRole.ForegroundRole
        return [
            (self.combo.itemText(i), self.combo.itemData(i, role) is not None)
            for i in range(first, self.combo.count())
        ]

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
        self._labels = {}
        grey = QBrush(self.palette().color(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text))
        for spec, label, reason in self._local:
            text = f"{spec}{SEPARATOR}{label}" + (f" — does not fit: {reason}" if reason else "")
            self._labels[text] = spec
            self.combo.addItem(text)
            index = self.combo.count() - 1
            tip = f"{label}; does not fit the loaded target: {reason}" if reason else label
            self.combo.setItemData(index, tip, Qt.ItemDataRole.ToolTipRole)
            if reason:
                self.combo.setItemData(index, grey, Qt.ItemDataRole.ForegroundRole)
        self.combo.setCurrentText(current)
        self.combo.blockSignals(False)

    def _show_spec(self, index: int) -> None:
        """A chosen local model shows its bare spec in the edit line."""
        text = self.combo.itemText(index)
        if text in self._labels:
            self.combo.setEditText(self._labels[text])

    def _add_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "A folder of models (.gguf, model folders)")
        if folder:
            self.folder_added.emit(folder)

    def _browse_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Model folder (with config.json)")
        if folder:
            self.set_spec(folder)

    def _browse_gguf(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "GGUF model file", "", "GGUF (*.gguf)")
        if path:
            self.set_spec(path)
