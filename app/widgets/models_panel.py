"""Models panel: target / draft / EAGLE-head pickers, device and dtype, Load with progress."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QWidget,
)

from app.engine import TargetInfo
from app.widgets.spec_picker import SpecPicker

DEVICES = ("auto", "cpu", "cuda", "mps")
DTYPES = ("auto", "float32", "float16", "bfloat16")


class ModelsPanel(QGroupBox):
    load_requested = Signal(str, str, str)  # target spec, device, dtype

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Models", parent)
        self.target = SpecPicker({"embedded": "SmolLM2-135M-Instruct (bundled GGUF)"})
        self.draft = SpecPicker(
            {
                "embedded": "the bundled token-level draft for the embedded model",
                "smollm2": "the target itself as draft (a sanity check: accepts everything)",
            }
        )
        self.head = SpecPicker({"embedded": "the bundled EAGLE head for the embedded model"})
        self.target.setToolTip("the target model: embedded, a hub id, a model folder or a .gguf")
        self.draft.setToolTip("the classic method's draft model (same tokenizer as the target)")
        self.head.setToolTip("the EAGLE head for eagle / eagle2: a head folder or a hub id")
        self.device = QComboBox()
        self.device.addItems(DEVICES)
        self.device.setToolTip("auto: CUDA, then MPS, then the CPU")
        self.dtype = QComboBox()
        self.dtype.addItems(DTYPES)
        self.dtype.setToolTip(
            "auto: bf16 on CUDA, fp16 on MPS, float32 on the CPU (float32: lossless is identical)"
        )
        self.load_button = QPushButton("Load")
        self.load_button.setToolTip("Load the target model (Ctrl+L); drafts load on first use")
        self.load_button.clicked.connect(self._request_load)
        self.progress = QProgressBar()
        self.progress.setRange(0, 100)
        self.progress.setTextVisible(False)
        self.progress.setMaximumHeight(8)
        self.message = QLabel("no model loaded")
        self._loaded = ""
        self.message.setWordWrap(True)

        device_row = QHBoxLayout()
        device_row.addWidget(self.device, 1)
        device_row.addWidget(QLabel("dtype"))
        device_row.addWidget(self.dtype, 1)
        device_row.addWidget(self.load_button)
        form = QFormLayout(self)
        form.addRow("Target", self.target)
        form.addRow("Draft", self.draft)
        form.addRow("EAGLE head", self.head)
        form.addRow("Device", device_row)
        form.addRow(self.progress)
        form.addRow(self.message)

    def specs(self) -> dict[str, str]:
        return {"draft": self.draft.spec(), "head": self.head.spec()}

    def set_loading(self, loading: bool) -> None:
        self.load_button.setEnabled(not loading)
        if loading:
            self.progress.setValue(0)

    def set_busy(self, busy: bool) -> None:
        self.load_button.setEnabled(not busy)

    def show_progress(self, message: str, fraction: float) -> None:
        self.message.setText(message)
        self.progress.setValue(int(round(100 * max(0.0, min(1.0, fraction)))))

    def show_loaded(self, info: TargetInfo) -> None:
        self.progress.setValue(100)
        millions = info.parameters / 1e6
        self._loaded = (
            f"target {info.spec}: {millions:.0f} M parameters, {info.device}, {info.dtype}"
        )
        self.message.setText(self._loaded)
        self.target.remember(info.spec)

    def show_extra_progress(self, message: str, fraction: float) -> None:
        """Progress of a draft / head loading for a run; the target line stays on top."""
        self.progress.setValue(int(round(100 * max(0.0, min(1.0, fraction)))))
        self.message.setText(f"{self._loaded}\n{message}" if self._loaded else message)

    def show_failed(self, message: str) -> None:
        self.progress.setValue(0)
        self.message.setText(f"load failed: {message}")

    def values(self) -> dict[str, Any]:
        return {
            "target": self.target.spec(),
            "draft": self.draft.spec(),
            "head": self.head.spec(),
            "device": self.device.currentText(),
            "dtype": self.dtype.currentText(),
            "recent_target": self.target.recent(),
            "recent_draft": self.draft.recent(),
            "recent_head": self.head.recent(),
        }

    def apply(self, values: dict[str, Any]) -> None:
        self.target.set_recent(values["recent_target"])
        self.draft.set_recent(values["recent_draft"])
        self.head.set_recent(values["recent_head"])
        self.target.set_spec(values["target"])
        self.draft.set_spec(values["draft"])
        self.head.set_spec(values["head"])
        for combo, key in ((self.device, "device"), (self.dtype, "dtype")):
            if combo.findText(values[key]) >= 0:
                combo.setCurrentText(values[key])

    def _request_load(self) -> None:
        self.load_requested.emit(
            self.target.spec() or "embedded", self.device.currentText(), self.dtype.currentText()
        )
