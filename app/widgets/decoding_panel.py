"""Decoding panel: method and policy from the engine's registries, sliders and numbers.

The method and policy lists come from `Registries` at runtime (only what the engine has);
until the engine is imported they show the saved choice, disabled. Lossy policies carry a
visible LOSSY badge. Tree settings appear for tree methods (EAGLE-2); 0 means "auto".

While a lossy policy is chosen the panel shows the runs so far as τ against their distance from
the target's distribution (`PolicyPlot`), fed with each finished run (`add_run`).

A policy profile (`specdec tune-policy`, specdec_core/run/policy_profile.py) may decide the policy
instead: chosen with "Policy profile…", read and checked here when chosen or restored (the
reader is JSON only; a missing or malformed file, or a policy the engine does not offer, is
one line and no profile), then passed to each run by its path (`RunRequest.policy_profile`).
The engine classifies the prompt and runs the kind's policy; the policy box says the profile
decides, and the line under it says which kind and policy the last run got.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QValidator
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSpinBox,
    QWidget,
)
from superqt import QLabeledDoubleSlider, QLabeledSlider

from app.engine_api import POLICY_KIND, Registries
from app.widgets.policy_plot import PolicyPlot
from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.events import RunSummary
from specdec_core.errors import SpecdecError
from specdec_core.measurement.run_distance import RunDistance
from specdec_core.run.policy_profile import PolicyProfile, load_profile

MAX_NEW_TOKENS = 4096
NEEDS = {
    "draft": "uses the Draft model",
    "head": "uses the EAGLE head",
    "medusa": "uses the Medusa heads",
    "speculator": "uses the MLP speculator",
    "mtp": "uses the MTP layers",
    "dflash": "uses the DFlash drafter",
}
NO_PROFILE = "none"
POLICY_TIP = "how drafts are verified: lossless keeps the target's output exactly"
PROFILE_FILTER = "Policy profiles (*.json);;All files (*)"
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


class RangeSpin(QSpinBox):
    """A spin box that refuses a number outside its range, typed whole, and says so
    (`refused`, with what was typed) where a plain one would change it without a word
    (dropping the extra digits of a larger one, going back on a smaller one): the value stays
    what it was."""

    refused = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setKeyboardTracking(False)  # the value is what was typed whole, not a prefix of it

    def validate(self, text: str, pos: int) -> object:
        typed = text.strip()
        if typed.isdigit() and not self.minimum() <= int(typed) <= self.maximum():
            return QValidator.State.Intermediate, text, pos
        return super().validate(text, pos)

    def fixup(self, text: str) -> str:
        typed = text.strip()
        if typed.isdigit() and not self.minimum() <= int(typed) <= self.maximum():
            self.refused.emit(typed)
            return str(self.value())
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
        self.max_new_tokens = RangeSpin()
        self.max_new_tokens.setRange(1, MAX_NEW_TOKENS)
        self.max_new_tokens.setValue(64)
        self.max_note = QLabel("")  # one line when a typed number was out of range (refused)
        self.max_note.setWordWrap(True)
        self.max_new_tokens.refused.connect(self._show_refused)
        self.max_new_tokens.valueChanged.connect(self._hide_refused)
        self.seed = _spin(0, 2**31 - 1)
        self.tree_depth = _spin(0, 16, auto=True)
        self.tree_topk = _spin(0, 32, auto=True)
        self.tree_tokens = _spin(0, 256, auto=True)
        self.policy_plot = PolicyPlot()
        self._profile: PolicyProfile | None = None
        self._profile_path = ""
        self._own_params: dict[str, float] = {}  # the policy's values typed before a profile
        self.profile_button = QPushButton("Policy profile…")
        self.profile_button.clicked.connect(self.choose_profile)
        self.profile_name = QLabel(NO_PROFILE)
        self.profile_clear = QPushButton("Clear")
        self.profile_clear.clicked.connect(lambda: self.set_profile(""))
        self.profile_clear.setEnabled(False)
        self.profile_note = QLabel("")  # what the profile gives, the last run's kind, or why not
        self.profile_note.setWordWrap(True)

        policy_row = QHBoxLayout()
        policy_row.addWidget(self.policy, 1)
        policy_row.addWidget(self.lossy_badge)
        profile_row = QHBoxLayout()
        profile_row.addWidget(self.profile_button)
        profile_row.addWidget(self.profile_name, 1)
        profile_row.addWidget(self.profile_clear)
        numbers = QHBoxLayout()
        numbers.addWidget(self.top_p)
        numbers.addWidget(QLabel("seed"))
        numbers.addWidget(self.seed)
        self.form = QFormLayout(self)
        self.form.addRow("Method", self.method)
        self.form.addRow("Policy", policy_row)
        self.form.addRow("", profile_row)
        self.form.addRow("", self.profile_note)
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
            self.policy: POLICY_TIP,
            self.profile_button: "a policy profile (specdec tune-policy): the policy and its "
            "parameter chosen per kind of request, the kind picked from each prompt",
            self.profile_clear: "use no policy profile: the policy box decides again",
            self.k: "draft length k: tokens drafted per step by chain methods (1–16)",
            self.temperature: "sampling temperature, 0 = greedy (0–2); applied to target and draft",
            self.top_p: "nucleus sampling: keep the smallest set of tokens with this mass (0.05–1)",
            self.seed: "random seed of a sampled run (same seed, same output)",
            self.max_new_tokens: "most tokens to generate (1–4096); a run also ends at EOS",
            self.tree_depth: "EAGLE-2 tree depth in draft steps (0 = sized for this device, –16)",
            self.tree_topk: "EAGLE-2 children per expanded node (0 = sized for this device, –32)",
            self.tree_tokens: "tree size in tokens, the root counted (0 = sized for this device, "
            "–256): EAGLE-2's, Medusa's and MTP's trees, and DDTree's node budget (DDTree's depth "
            "is its DFlash block, its width the budget: depth and top-k do not apply)",
        }
        for widget, tip in tips.items():
            widget.setToolTip(tip)
        self._show_tree(False)
        self.form.setRowVisible(self.params_box, False)
        self.form.setRowVisible(self.max_note, False)
        self.form.setRowVisible(self.policy_plot, False)
        self.form.setRowVisible(self.profile_note, False)

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
        if self._profile is not None:  # checked again: this engine's policies
            self.set_profile(self._profile_path)

    def method_name(self) -> str:
        return self.method.currentData() or ""

    def policy_name(self) -> str:
        return self.policy.currentData() or "lossless"

    def profile_path(self) -> str:
        """The policy profile runs use ("" for none: the policy box decides)."""
        return self._profile_path

    def is_lossy(self) -> bool:
        if self._registries is None:
            return False
        return any(p.lossy for p in self._registries.policies if p.name == self.policy_name())

    # -- values -----------------------------------------------------------------------------
    def config(self) -> DecodeConfig:
        self.max_new_tokens.interpretText()  # a number still being typed counts (or is refused)
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
            "policy": self._own_policy(),
            "policy_profile": self._profile_path,
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
        """The values by field name (saved settings, Tune's point); the profile is read again
        only when it is another file."""
        profile = str(values.get("policy_profile") or "")
        if profile != self._profile_path:
            self._leave_profile()
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
            if self._profile is None:  # else the box shows that the profile decides
                self.select(self.policy, values["policy"])
        if profile and profile != self._profile_path:
            self.set_profile(profile)

    # -- policy profile ---------------------------------------------------------------------
    def choose_profile(self) -> None:
        """The Policy profile… button: a file picker, then `set_profile` (Cancel: no change)."""
        start = self._profile_path or ""
        path, _ = QFileDialog.getOpenFileName(self, "Policy profile", start, PROFILE_FILTER)
        if path:
            self.set_profile(path)

    def set_profile(self, path: str) -> bool:
        """Runs use the profile at `path` ("": none, the policy box decides again). A file
        that is not a readable profile, or one whose policy this engine lacks, is refused in
        one line under the policy, and no profile is used. -> whether it was taken."""
        if not path:
            self._leave_profile()
            return True
        try:
            profile = load_profile(path)
            self._check_policy(profile)
        except SpecdecError as error:
            self._leave_profile()
            self._note(f"{error}; no policy profile is used")
            return False
        self._enter_profile(profile, path)
        return True

    def _check_policy(self, profile: PolicyProfile) -> None:
        """The profile's policy and parameters are ones this engine offers (once known)."""
        if self._registries is None:
            return
        policy = next((p for p in self._registries.policies if p.name == profile.policy), None)
        if policy is None:
            raise SpecdecError(f"this engine has no policy '{profile.policy}'")
        known = {name for name, _ in policy.params}
        unknown = sorted({profile.param, *profile.params} - known)
        if unknown:
            raise SpecdecError(f"policy '{profile.policy}' has no parameter '{unknown[0]}'")

    def _enter_profile(self, profile: PolicyProfile, path: str) -> None:
        if self._profile is None:  # the values typed for the policy box's policy, kept
            self._own_params = {name: spin.value() for name, spin in self.params.items()}
        self._profile, self._profile_path = profile, path
        self.policy.setPlaceholderText(f"by profile: {profile.policy}")
        self.policy.setCurrentIndex(-1)  # the placeholder: the profile decides
        self.policy.setEnabled(False)
        self.policy.setToolTip("the policy profile decides the policy per prompt; Clear: this box")
        self.profile_name.setText(Path(path).name)
        self.profile_name.setToolTip(path)
        self.profile_clear.setEnabled(True)
        self._note(_per_kind(profile))
        self._show_lossy()

    def _leave_profile(self) -> None:
        had = self._profile is not None
        self._profile, self._profile_path = None, ""
        self.profile_name.setText(NO_PROFILE)
        self.profile_name.setToolTip("")
        self.profile_clear.setEnabled(False)
        self._note("")
        if not had:
            return
        self.select(self.policy, self._pending.get("policy") or "lossless")
        self.policy.setPlaceholderText("")  # after: on no choice, this selects the first
        self.policy.setEnabled(self._registries is not None)
        self.policy.setToolTip(POLICY_TIP)
        for name, value in self._own_params.items():
            if name in self.params:
                self.params[name].setValue(value)
        self._show_lossy()

    def _own_policy(self) -> str:
        """The policy box's own choice (kept while a profile decides)."""
        if self._profile is not None:
            return self._pending.get("policy") or "lossless"
        return self.policy_name()

    def _profile_lossy(self) -> bool:
        """Can the profile's policy change the output (a lossy policy for some kind)?"""
        profile = self._profile
        if profile is None or not any(kind.value is not None for kind in profile.kinds):
            return False
        policies = self._registries.policies if self._registries is not None else ()
        return any(p.lossy for p in policies if p.name == profile.policy)

    def _note(self, text: str) -> None:
        self.profile_note.setText(text)
        self.form.setRowVisible(self.profile_note, bool(text))

    # -- internals --------------------------------------------------------------------------
    def _show_refused(self, typed: str) -> None:
        spin = self.max_new_tokens
        self.max_note.setText(
            f"{typed} refused: type {spin.minimum()}–{spin.maximum()}; it stays {spin.value()}"
        )
        self.max_note.setStyleSheet("QLabel { color: #c1121f; }")
        self.form.setRowVisible(self.max_note, True)

    def _hide_refused(self, value: int) -> None:
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
        run; a lossless one is at 0); a run a policy profile chose the policy of names its
        kind under the policy."""
        self.policy_plot.add_run(summary, distance)
        kind = summary.config.get(POLICY_KIND)
        if kind and self._profile is not None:
            params = summary.config.get("policy_params") or {}
            chosen = " ".join(f"{name}={value:g}" for name, value in params.items())
            self._note(f"profile: kind {kind} → {summary.policy} {chosen}".rstrip())

    def _on_policy(self) -> None:
        self._show_lossy()
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

    def _show_lossy(self) -> None:
        lossy = self.is_lossy() or self._profile_lossy()
        self.lossy_badge.setVisible(lossy)
        self.form.setRowVisible(self.policy_plot, lossy)

    def _show_tree(self, visible: bool) -> None:
        for widget in (self.tree_depth, self.tree_topk, self.tree_tokens):
            self.form.setRowVisible(widget, visible)


def _per_kind(profile: PolicyProfile) -> str:
    """'threshold tau per kind: code 0.1, chat lossless'."""
    kinds = ", ".join(
        f"{kind.kind} {'lossless' if kind.value is None else f'{kind.value:g}'}"
        for kind in profile.kinds
    )
    return f"{profile.policy} {profile.param} per kind: {kinds}"
