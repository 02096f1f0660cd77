"""Decoding panel: method and policy from the engine's registries, sliders and numbers.

The method and policy lists come from `Registries` at runtime (only what the engine has);
until the engine is imported they show the saved choice, disabled. Lossy policies carry a
visible LOSSY badge. Tree settings appear for tree methods (EAGLE-2); 0 means "auto".

While a lossy policy is chosen the panel shows the runs so far as τ against their distance from
the target's distribution (`PolicyPlot`), fed with each finished run (`add_run`).
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QValidator
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QSpinBox,
    QWidget,
)
from superqt import QLabeledDoubleSlider, QLabeledSlider

from app.engine_api import Registries
from app.widgets.policy_plot import PolicyPlot
from specdec_core.config import DecodeConfig
from specdec_core.events import RunSummary
from specdec_core.run_distance import RunDistance

MAX_NEW_TOKENS = 4096
NEEDS = {"draft": "uses the Draft model", "head": "uses the EAGLE head"}
LOSSY_STYLE = (
    "QLabel { color: white; background: #c1121f; font-weight: bold; padding: 1px 6px;"
    " border-radius: 3px; }"
)


def _spin(minimum: int, maximum: int, auto: bool = False) -> QSpinBox:
    spin = QSpinBox()
    spin.setRange(minimum, maximum)
    if auto:
        spin.setSpecialValueText("auto")
    return spin


class CappedSpin(QSpinBox):
    """A spin box that takes a number above its maximum as typed, then sets the maximum and
    says so (`capped`, with what was typed), where a plain one would drop the extra digits."""

    capped = Signal(str)

    def validate(self, text: str, pos: int) -> object:
        if text.strip().isdigit() and int(text) > self.maximum():
            return QValidator.State.Intermediate, text, pos
        return super().validate(text, pos)

    def fixup(self, text: str) -> str:
        if text.strip().isdigit() and int(text) > self.maximum():
            self.capped.emit(text.strip())
            return str(self.maximum())
        return super().fixup(text)


class DecodingPanel(QGroupBox):
    method_changed = Signal(str)
    policy_param_changed = Signal(str, float)  # a parameter of the chosen policy, its value

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Decoding", parent)
        self._registries: Registries | None = None
        self._pending: dict[str, Any] = {}
        self.method = QComboBox()
        self.method.setEnabled(False)
        self.method.addItem("loading engine…", "")
        self.method.currentIndexChanged.connect(self._on_method)
        self.policy = QComboBox()
        self.policy.setEnabled(False)
        self.policy.currentIndexChanged.connect(self._on_policy)
        self.lossy_badge = QLabel("LOSSY")
        self.lossy_badge.setStyleSheet(LOSSY_STYLE)
        self.lossy_badge.setToolTip("this policy may change the output compared to the target")
        self.lossy_badge.setVisible(False)
        self.params_box = QWidget()
        self.params_layout = QHBoxLayout(self.params_box)
        self.params_layout.setContentsMargins(0, 0, 0, 0)
        self.params: dict[str, QDoubleSpinBox] = {}
        self.k = QLabeledSlider(Qt.Orientation.Horizontal)
        self.k.setRange(1, 16)
        self.k.setValue(4)
        self.temperature = QLabeledDoubleSlider(Qt.Orientation.Horizontal)
        self.temperature.setRange(0.0, 2.0)
        self.temperature.setSingleStep(0.05)
        self.temperature.setDecimals(2)
        self.top_p = QDoubleSpinBox()
        self.top_p.setRange(0.05, 1.0)
        self.top_p.setSingleStep(0.05)
        self.top_p.setValue(1.0)
        self.max_new_tokens = CappedSpin()
        self.max_new_tokens.setRange(1, MAX_NEW_TOKENS)
        self.max_new_tokens.setValue(64)
        self.max_note = QLabel("")  # one line when a typed number was above the maximum
        self.max_note.setWordWrap(True)
        self.max_new_tokens.capped.connect(self._show_capped)
        self.max_new_tokens.valueChanged.connect(self._hide_capped)
        self.seed = _spin(0, 2**31 - 1)
        self.tree_depth = _spin(0, 16, auto=True)
        self.tree_topk = _spin(0, 32, auto=True)
        self.tree_tokens = _spin(0, 256, auto=True)
        self.policy_plot = PolicyPlot()

        policy_row = QHBoxLayout()
        policy_row.addWidget(self.policy, 1)
        policy_row.addWidget(self.lossy_badge)
        numbers = QHBoxLayout()
        numbers.addWidget(self.top_p)
        numbers.addWidget(QLabel("seed"))
        numbers.addWidget(self.seed)
        self.form = QFormLayout(self)
        self.form.addRow("Method", self.method)
        self.form.addRow("Policy", policy_row)
        self.form.addRow("Policy params", self.params_box)
        self.form.addRow(self.policy_plot)
        self.form.addRow("Draft length k", self.k)
        self.form.addRow("Temperature", self.temperature)
        self.form.addRow("Top-p", numbers)
        self.form.addRow("Max new tokens", self.max_new_tokens)
        self.form.addRow("", self.max_note)
        self.form.addRow("Tree depth", self.tree_depth)
        self.form.addRow("Tree top-k", self.tree_topk)
        self.form.addRow("Tree size", self.tree_tokens)
        tips = {
            self.method: "how tokens are drafted (the engine's methods); hover an entry for it",
            self.policy: "how drafts are verified: lossless keeps the target's output exactly",
            self.k: "draft length k: tokens drafted per step by chain methods (1–16)",
            self.temperature: "sampling temperature, 0 = greedy (0–2); applied to target and draft",
            self.top_p: "nucleus sampling: keep the smallest set of tokens with this mass (0.05–1)",
            self.seed: "random seed of a sampled run (same seed, same output)",
            self.max_new_tokens: "most tokens to generate (1–4096); a run also ends at EOS",
            self.tree_depth: "EAGLE-2 tree depth in draft steps (0 = sized for this device, –16)",
            self.tree_topk: "EAGLE-2 children per expanded node (0 = sized for this device, –32)",
            self.tree_tokens: "EAGLE-2 tree size in tokens (0 = sized for this device, –256)",
        }
        for widget, tip in tips.items():
            widget.setToolTip(tip)
        self._show_tree(False)
        self.form.setRowVisible(self.params_box, False)
        self.form.setRowVisible(self.max_note, False)
        self.form.setRowVisible(self.policy_plot, False)

    # -- registries -------------------------------------------------------------------------
    def set_registries(self, registries: Registries) -> None:
        """The engine's methods and policies; the choices made stay, the policy's parameter
        values too when the policy is offered again (a restarted engine)."""
        self._registries = registries
        wanted_method = self._pending.get("method") or self.method_name()
        wanted_policy = self._pending.get("policy") or self.policy_name()
        params = {name: spin.value() for name, spin in self.params.items()}  # typed by hand
        self.method.blockSignals(True)
        self.method.clear()
        for family, methods in registries.grouped():
            if family:  # a group's heading: shown, never chosen
                self.method.addItem(family.upper())
                heading = self.method.model().item(self.method.count() - 1)
                heading.setFlags(Qt.ItemFlag.NoItemFlags)
            for info in methods:
                self.method.addItem(info.label, info.name)
                tip = f"{info.name}: {info.summary or NEEDS.get(info.needs or '', '')}"
                self.method.setItemData(self.method.count() - 1, tip, Qt.ItemDataRole.ToolTipRole)
        self.method.blockSignals(False)
        self.policy.blockSignals(True)
        self.policy.clear()
        for policy in registries.policies:
            self.policy.addItem(
                f"{policy.name} (lossy)" if policy.lossy else policy.name, policy.name
            )
        self.policy.blockSignals(False)
        self.method.setEnabled(True)
        self.policy.setEnabled(True)
        self.select(self.method, wanted_method)
        if self.method.currentData() is None:  # a heading: the first method instead
            first = next(i for i in range(self.method.count()) if self.method.itemData(i))
            self.method.setCurrentIndex(first)
        self.select(self.policy, wanted_policy or "lossless")
        self._on_method()
        self._on_policy()
        if self.policy_name() == wanted_policy:  # the same policy again (Restart engine)
            for name, value in params.items():
                if name in self.params:
                    self.params[name].setValue(value)

    def method_name(self) -> str:
        return self.method.currentData() or ""

    def policy_name(self) -> str:
        return self.policy.currentData() or "lossless"

    def is_lossy(self) -> bool:
        if self._registries is None:
            return False
        return any(p.lossy for p in self._registries.policies if p.name == self.policy_name())

    # -- values -----------------------------------------------------------------------------
    def config(self) -> DecodeConfig:
        self.max_new_tokens.interpretText()  # a number still being typed counts (or is capped)
        return DecodeConfig(
            max_new_tokens=self.max_new_tokens.value(),
            k=self.k.value(),
            temperature=round(self.temperature.value(), 2),
            top_p=round(self.top_p.value(), 2),
            seed=self.seed.value(),
            policy=self.policy_name(),
            policy_params={name: spin.value() for name, spin in self.params.items()},
            tree_depth=self.tree_depth.value() or None,
            tree_topk=self.tree_topk.value() or None,
            tree_tokens=self.tree_tokens.value() or None,
        )

    def values(self) -> dict[str, Any]:
        return {
            "method": self.method_name() or self._pending.get("method", ""),
            "policy": self.policy_name(),
            "k": self.k.value(),
            "temperature": round(self.temperature.value(), 2),
            "top_p": round(self.top_p.value(), 2),
            "max_new_tokens": self.max_new_tokens.value(),
            "seed": self.seed.value(),
            "tree_depth": self.tree_depth.value(),
            "tree_topk": self.tree_topk.value(),
            "tree_tokens": self.tree_tokens.value(),
        }

    def apply(self, values: dict[str, Any]) -> None:
        self._pending = {"method": values["method"], "policy": values["policy"]}
        self.k.setValue(int(values["k"]))
        self.temperature.setValue(float(values["temperature"]))
        self.top_p.setValue(float(values["top_p"]))
        self.max_new_tokens.setValue(int(values["max_new_tokens"]))
        self.seed.setValue(int(values["seed"]))
        self.tree_depth.setValue(int(values["tree_depth"]))
        self.tree_topk.setValue(int(values["tree_topk"]))
        self.tree_tokens.setValue(int(values["tree_tokens"]))
        if self._registries is not None:
            self.select(self.method, values["method"])
            self.select(self.policy, values["policy"])

    # -- internals --------------------------------------------------------------------------
    def _show_capped(self, typed: str) -> None:
        self.max_note.setText(f"the most is {MAX_NEW_TOKENS} ({typed} typed)")
        self.form.setRowVisible(self.max_note, True)

    def _hide_capped(self, value: int) -> None:
        if value < MAX_NEW_TOKENS:
            self.form.setRowVisible(self.max_note, False)

    @staticmethod
    def select(combo: QComboBox, name: str) -> None:
        index = combo.findData(name)
        if index >= 0:
            combo.setCurrentIndex(index)

    def _on_method(self) -> None:
        name = self.method_name()
        info = self._registries.method(name) if self._registries else None
        self._show_tree(bool(info and info.tree))
        self.k.setEnabled(name not in ("", "ar") and not (info and (info.tree or not info.k)))
        if name:
            self._pending["method"] = name
            self.method_changed.emit(name)

    def add_run(self, summary: RunSummary, distance: RunDistance | None = None) -> None:
        """A finished run for the τ-against-distance plot (`distance`: measured for a lossy
        run; a lossless one is at 0)."""
        self.policy_plot.add_run(summary, distance)

    def _on_policy(self) -> None:
        self.lossy_badge.setVisible(self.is_lossy())
        self.form.setRowVisible(self.policy_plot, self.is_lossy())
        self._build_params()
        if self.policy.currentData():
            self._pending["policy"] = self.policy_name()

    def _build_params(self) -> None:
        """One spin box per parameter of the chosen policy (its defaults preset)."""
        for spin in self.params.values():
            spin.deleteLater()
        while self.params_layout.count():
            item = self.params_layout.takeAt(0)
            if item.widget() is not None:
                item.widget().deleteLater()
        self.params.clear()
        policy = None
        if self._registries is not None:
            policy = next(
                (p for p in self._registries.policies if p.name == self.policy_name()), None
            )
        for name, default in policy.params if policy else ():
            spin = QDoubleSpinBox()
            spin.setRange(-1e6, 1e6)
            spin.setDecimals(3)
            spin.setSingleStep(0.05)
            spin.setValue(default)
            spin.valueChanged.connect(
                lambda value, name=name: self.policy_param_changed.emit(name, value)
            )
            self.params_layout.addWidget(QLabel(name))
            self.params_layout.addWidget(spin, 1)
            self.params[name] = spin
        self.form.setRowVisible(self.params_box, bool(self.params))

    def _show_tree(self, visible: bool) -> None:
        for widget in (self.tree_depth, self.tree_topk, self.tree_tokens):
            self.form.setRowVisible(widget, visible)
