"""Prompt editor with Generate / Stop / Compare buttons and the chat-template switch."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QHBoxLayout,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)


class PromptPanel(QWidget):
    generate_requested = Signal()
    stop_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.editor = QPlainTextEdit()
        self.editor.setPlaceholderText("Type a prompt; Ctrl+Return generates, Esc stops.")
        self.editor.setMinimumHeight(60)
        self.raw = QCheckBox("raw (no chat template)")
        self.raw.setToolTip("send the text as it is, without the model's chat template")
        self.generate_button = QPushButton("Generate")
        self.generate_button.setToolTip("Generate with the chosen method (Ctrl+Return)")
        self.generate_button.setDefault(True)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Stop after the current step (Esc)")
        self.stop_button.setEnabled(False)
        self.generate_button.clicked.connect(self.generate_requested)
        self.stop_button.clicked.connect(self.stop_requested)
        buttons = QHBoxLayout()
        buttons.addWidget(self.raw)
        buttons.addStretch(1)
        buttons.addWidget(self.generate_button)
        buttons.addWidget(self.stop_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.editor, 1)
        layout.addLayout(buttons)

    def text(self) -> str:
        return self.editor.toPlainText()

    def set_text(self, text: str) -> None:
        self.editor.setPlainText(text)

    def set_state(self, can_generate: bool, stoppable: bool) -> None:
        """Generate when a run may start; Stop while something stoppable runs (both at once
        while a run's autoregressive reference is measured in the background)."""
        self.generate_button.setEnabled(can_generate)
        self.stop_button.setEnabled(stoppable)
