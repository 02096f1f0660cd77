"""Models panel: target / draft / EAGLE-head / Medusa-heads / MLP-speculator / MTP-layers /
DFlash-drafter pickers, device and dtype, placement (device map, max memory), trust remote
code, Load with progress and Cancel.

Every picker a method can draft with is always shown, each labelled with what it holds: a
Compare runs several methods at once, each with its own. `specs()` maps what a method needs
("draft", "head", "medusa", "speculator", "mtp", "dflash") to the chosen spec; an empty one is
the engine's `embedded` (the bundled one; for MTP, the target's own layers).

The pickers list the models on this machine (specdec_core.run.local_models: the Hugging Face cache
and the folders added with Browse ▸ Add a folder…), refreshed each time a list opens (a scan
takes milliseconds and imports no torch). Once a target has loaded, heads and drafts that fit
it come first and the rest are greyed with the reason; a target with published EAGLE heads
puts them at the top of the head list; the MTP list offers the models whose config states MTP
layers (another copy of the target's checkpoint)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QWidget,
)

from app.engine_api import LoadSettings, TargetInfo
from app.widgets.spec_picker import LocalEntry, SpecPicker
from specdec_core.errors import SpecdecError
from specdec_core.heads.mtp.layouts import stated_count
from specdec_core.resources import EAGLE3_HEAD, HEAD, bundled_heads, resource_path
from specdec_core.run.local_models import LocalModel, list_local, ranked, suggested_heads
from specdec_core.training.card import CARD, diet, read_card

DEVICES = ("auto", "cpu", "cuda", "mps")
DTYPES = ("auto", "float32", "float16", "bfloat16")
DEVICE_MAPS = ("none", "auto", "balanced", "sequential")
TRUST_TIP = (
    "Allow a model whose config.json names its own Python code (auto_map). That code runs "
    "with your permissions: read it first, and tick this only for models you trust."
)
MEDUSA_TIP = (
    "Medusa heads, for the Medusa (tree) method: embedded (the heads bundled for the embedded "
    "model), a heads folder or a hub id, in FasterDecoding's or vLLM's layout"
)
SPECULATOR_TIP = (
    "MLP speculator, for the MLP speculator (chain) method: embedded (the one bundled for the "
    "embedded model), a speculator folder or a hub id in vLLM's layout; train one for your "
    "model with `specdec train mlp-speculator`"
)
MTP_TIP = (
    "MTP layers, for the Native MTP (chain / tree) methods: embedded reads them from the "
    "target's own checkpoint; or another copy of that checkpoint (a folder or a hub id)"
)
DFLASH_TIP = (
    "DFlash block drafter, for the DFlash (block) and DDTree methods: embedded (the one bundled "
    "for the embedded model), a drafter folder or a hub id in z-lab's or the speculators "
    "layout (e.g. z-lab/Qwen3-8B-DFlash-b16); train one for your model with "
    "`specdec train dflash`"
)
# what a fresh panel (or settings saved before a picker existed) chooses
EXTRA_DEFAULTS = {
    "medusa": "embedded",
    "speculator": "embedded",
    "mtp": "embedded",
    "dflash": "embedded",
}


class ModelsPanel(QGroupBox):
    load_requested = Signal(str, str, str)  # target spec, device, dtype
    cancel_requested = Signal()  # stop a download or load in progress

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Models", parent)
        self.target = SpecPicker({"embedded": "SmolLM2-135M-Instruct (bundled GGUF)"})
        self.draft = SpecPicker(
            {
                "embedded": _with_diet(
                    "the bundled token-level draft for the embedded model", resource_path("draft")
                ),
                "smollm2": "the target itself as draft (a sanity check: accepts everything)",
            }
        )
        self.head = SpecPicker(
            {
                name: _with_diet(_bundled_head_line(name), folder)
                for name, folder in {HEAD: None, **bundled_heads()}.items()
            }
        )
        self.target.setToolTip("the target model: embedded, a hub id, a model folder or a .gguf")
        self.draft.setToolTip("the classic method's draft model (any tokenizer)")
        self.head.setToolTip("the EAGLE head for eagle / eagle2: a head folder or a hub id")
        self.medusa = SpecPicker(
            {
                "embedded": _with_diet(
                    "the Medusa heads bundled for the embedded model", resource_path("medusa")
                )
            }
        )
        self.speculator = SpecPicker(
            {
                "embedded": _with_diet(
                    "the MLP speculator bundled for the embedded model",
                    resource_path("mlp-speculator"),
                )
            }
        )
        self.mtp = SpecPicker({"embedded": "the MTP layers in the target's own checkpoint"})
        self.dflash = SpecPicker(
            {
                "embedded": _with_diet(
                    "the DFlash drafter bundled for the embedded model", resource_path("dflash")
                )
            }
        )
        for picker, tip, placeholder in (
            (self.medusa, MEDUSA_TIP, "embedded, a heads folder or hub id"),
            (self.speculator, SPECULATOR_TIP, "a speculator folder or hub id"),
            (self.mtp, MTP_TIP, "embedded (the target's) or a copy of it"),
            (self.dflash, DFLASH_TIP, "embedded, a drafter folder or hub id"),
        ):
            picker.setToolTip(tip)
            picker.combo.lineEdit().setPlaceholderText(placeholder)
        # what a method needs -> the picker of its spec
        self.extras: dict[str, SpecPicker] = {
            "draft": self.draft,
            "head": self.head,
            "medusa": self.medusa,
            "speculator": self.speculator,
            "mtp": self.mtp,
            "dflash": self.dflash,
        }
        for needs, default in EXTRA_DEFAULTS.items():
            self.extras[needs].set_spec(default)
        self.device = QComboBox()
        self.device.addItems(DEVICES)
        self.device.setToolTip("auto: CUDA, then MPS, then the CPU")
        self.dtype = QComboBox()
        self.dtype.addItems(DTYPES)
        self.dtype.setToolTip(
            "auto: bf16 on CUDA, fp16 on MPS; on a CPU bf16 where it multiplies bf16 natively "
            "(AVX-512 BF16, AMX: faster, speculative output identical to bf16 autoregressive), "
            "else float32. float32 gives the model's own float32 output"
        )
        self.load_button = QPushButton("Load")
        self.load_button.setToolTip("Load the target model (Ctrl+L); drafts load on first use")
        self.load_button.clicked.connect(self._request_load)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Stop the download or load in progress (it resumes later)")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.cancel_requested)
        self.device_map = QComboBox()
        self.device_map.addItems(DEVICE_MAPS)
        self.device_map.setToolTip(
            "none: the whole model on the device; auto / balanced / sequential: accelerate "
            "splits a model larger than the GPU over the GPUs, then the CPU, then disk"
        )
        self.max_memory = QLineEdit()
        self.max_memory.setPlaceholderText("max memory, e.g. 0=20GiB,cpu=64GiB")
        self.max_memory.setToolTip(
            "With a device map: the most each device may hold (DEVICE=SIZE, comma-separated; "
            "DEVICE: a GPU index, cpu, mps or disk)"
        )
        self.trust_remote_code = QCheckBox("Trust remote code")
        self.trust_remote_code.setToolTip(TRUST_TIP)
        self.folders: list[str] = []  # where to look for .gguf files and model folders
        self._target_config: dict = {}
        for picker in (self.target, *self.extras.values()):
            picker.popup_opening.connect(self.refresh_local)
            picker.folder_added.connect(self.add_folder)
        self._found: list = []  # the last listing (LocalModel)
        self.target.changed.connect(lambda _: self._show_local())  # suggestions; no rescan
        self.progress = QProgressBar()
        self.progress.setRange(0, 100)
        self.progress.setTextVisible(False)
        self.progress.setMaximumHeight(8)
        self.message = QLabel("no model loaded")
        self._loaded = ""
        self._extra_loading = ""  # a draft / head a run is loading (its progress line)
        self.message.setWordWrap(True)

        device_row = QHBoxLayout()
        device_row.addWidget(self.device, 1)
        device_row.addWidget(QLabel("dtype"))
        device_row.addWidget(self.dtype, 1)
        placement_row = QHBoxLayout()
        placement_row.addWidget(self.device_map)
        placement_row.addWidget(self.max_memory, 1)
        load_row = QHBoxLayout()  # rows kept short: the panel must fit a 1280-pixel screen
        load_row.addWidget(self.trust_remote_code)
        load_row.addStretch(1)
        load_row.addWidget(self.load_button)
        load_row.addWidget(self.cancel_button)
        form = QFormLayout(self)
        form.addRow("Target", self.target)
        form.addRow("Draft", self.draft)
        form.addRow("EAGLE head", self.head)
        form.addRow("Medusa heads", self.medusa)
        form.addRow("MLP speculator", self.speculator)
        form.addRow("MTP layers", self.mtp)
        form.addRow("DFlash drafter", self.dflash)
        form.addRow("Device", device_row)
        form.addRow("Split", placement_row)
        form.addRow(load_row)
        form.addRow(self.progress)
        form.addRow(self.message)

    def specs(self) -> dict[str, str]:
        """What a method needs ("draft", "head", "medusa", "speculator", "mtp", "dflash") -> its
        spec."""
        return {needs: picker.spec() for needs, picker in self.extras.items()}

    def load_settings(self) -> LoadSettings:
        device_map = self.device_map.currentText()
        return LoadSettings(
            device_map=None if device_map == "none" else device_map,
            max_memory=self.max_memory.text().strip(),
            trust_remote_code=self.trust_remote_code.isChecked(),
        )

    def add_folder(self, folder: str) -> None:
        if folder and folder not in self.folders:
            self.folders.append(folder)
        self.refresh_local()

    def refresh_local(self) -> None:
        """List the models on this machine in the pickers, ranked for the loaded target."""
        self._found = list_local(self.folders)
        self._show_local()

    def _show_local(self) -> None:
        lms = [m for m in self._found if m.kind == "causal-lm"]
        heads = [m for m in self._found if m.kind in ("eagle1", "eagle3")]
        config, spec = self._target_config, self.target.spec()

        def entries(models, fit: bool = True, target: str = "") -> list[LocalEntry]:
            if not (fit and config):  # nothing loaded yet: nothing to fit against
                return [(m.spec, m.label, None) for m in models]
            return [(m.spec, m.label, why) for m, why in ranked(config, models, target)]

        self.target.set_local(entries(lms, fit=False))
        self.draft.set_local(entries(lms))
        self.head.set_local(self._with_suggested(spec, entries(heads, target=spec)))
        self.mtp.set_local(entries([m for m in lms if _states_mtp(m)]))

    @staticmethod
    def _with_suggested(target: str, entries: list[LocalEntry]) -> list[LocalEntry]:
        """The heads published for `target` on top, downloaded or not."""
        known = [s.lower() for s in suggested_heads(target)]
        here = [e for e in entries if e[0].lower() in known and e[2] is None]
        note = "published for this target, downloads on first use"
        present = {e[0].lower() for e in entries}
        missing = [(s, note, None) for s in suggested_heads(target) if s.lower() not in present]
        return [*here, *missing, *(e for e in entries if e not in here)]

    def set_loading(self, loading: bool) -> None:
        self.load_button.setEnabled(not loading)
        self.cancel_button.setEnabled(loading)
        if loading:
            self.progress.setValue(0)

    def set_busy(self, busy: bool) -> None:
        self.load_button.setEnabled(not busy)
        if not busy:
            self.cancel_button.setEnabled(False)

    def show_progress(self, message: str, fraction: float) -> None:
        self.message.setText(message)
        self.progress.setValue(int(round(100 * max(0.0, min(1.0, fraction)))))

    def show_loaded(self, info: TargetInfo) -> None:
        self.progress.setValue(100)
        millions = info.parameters / 1e6
        self._loaded = (
            f"target {info.spec}: {millions:.0f} M parameters, {info.device}, {info.dtype}"
        ) + (f"\n{info.dtype_reason}" if info.dtype_reason else "")  # which dtype runs and why
        self.message.setText(self._loaded)
        self.target.remember(info.spec)
        self._target_config = dict(info.config)
        self.refresh_local()

    def show_extra_progress(self, message: str, fraction: float) -> None:
        """Progress of a draft / head loading for a run; the target line stays on top."""
        self.progress.setValue(int(round(100 * max(0.0, min(1.0, fraction)))))
        self.message.setText(f"{self._loaded}\n{message}" if self._loaded else message)
        self._extra_loading = message if fraction < 1.0 else ""

    def end_extra_progress(self) -> None:
        """The run ended: a draft / head load it left unfinished (it failed, or Stop came
        first) no longer reads as loading."""
        loading, self._extra_loading = self._extra_loading, ""
        if loading:
            self.progress.setValue(0)
            line = f"{loading.removeprefix('loading ')} did not load (the status line says why)"
            self.message.setText(f"{self._loaded}\n{line}" if self._loaded else line)

    def show_unloaded(self, message: str) -> None:
        """Nothing is loaded any more (the engine process ended)."""
        self.progress.setValue(0)
        self._loaded = ""
        self.message.setText(message)

    def show_failed(self, message: str, loaded: str | None = None) -> None:
        """A load failed; `loaded`: the spec of the model still loaded, which the Target box
        shows again (it names what is loaded, not the path that failed: the message does)."""
        self.progress.setValue(0)
        self.message.setText(f"load failed: {message}")
        if loaded is not None:
            self.target.set_spec(loaded)

    def values(self) -> dict[str, Any]:
        pickers = {"target": self.target, **self.extras}
        return {
            **{name: picker.spec() for name, picker in pickers.items()},
            **{f"recent_{name}": picker.recent() for name, picker in pickers.items()},
            "device": self.device.currentText(),
            "dtype": self.dtype.currentText(),
            "device_map": self.device_map.currentText(),
            "max_memory": self.max_memory.text(),
            "trust_remote_code": self.trust_remote_code.isChecked(),
            "model_folders": list(self.folders),
        }

    def apply(self, values: dict[str, Any]) -> None:
        """`values` as `values()` writes them; a picker newer than the saved values keeps its
        default (EXTRA_DEFAULTS) and an empty recent list."""
        for name, picker in {"target": self.target, **self.extras}.items():
            picker.set_recent(values.get(f"recent_{name}", []))
            picker.set_spec(values.get(name, EXTRA_DEFAULTS.get(name, "")))
        for combo, key in (
            (self.device, "device"), (self.dtype, "dtype"), (self.device_map, "device_map")
        ):  # fmt: skip
            if combo.findText(values[key]) >= 0:
                combo.setCurrentText(values[key])
        self.max_memory.setText(values["max_memory"])
        self.trust_remote_code.setChecked(values["trust_remote_code"])
        self.folders = [f for f in values["model_folders"] if isinstance(f, str)]

    def _request_load(self) -> None:
        self.load_requested.emit(
            self.target.spec() or "embedded", self.device.currentText(), self.dtype.currentText()
        )


def _states_mtp(model: LocalModel) -> bool:
    """Whether a model's config says its checkpoint ships MTP layers."""
    inner = model.config.get("text_config")
    configs = [model.config, inner] if isinstance(inner, dict) else [model.config]
    try:
        return any(stated_count(config) for config in configs)
    except (TypeError, ValueError):  # a count that is not a number: not a checkpoint to offer
        return False


def _with_diet(line: str, folder: Path | None) -> str:
    """A bundled drafter's line, with what its card says it was fed, for how long, on the next
    line (the picker's hover)."""
    if folder is None or not (folder / CARD).is_file():
        return line
    try:
        return f"{line}\n{diet(read_card(folder))}"
    except SpecdecError:
        return line


def _bundled_head_line(name: str) -> str:
    """The head picker's line for a bundled head."""
    if name == HEAD:
        return "the bundled EAGLE head for the embedded model"
    if name == EAGLE3_HEAD:
        return "the bundled EAGLE-3 head for the embedded model (vLLM serves it as eagle3)"
    return f"an earlier bundled head ({name}), to compare with the current one"
