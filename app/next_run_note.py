"""A decoding setting changed while a run is going applies to the next run, and says so.

A run's request is read from the panels when it is queued, so the run in progress (and the
rest of its Compare or its reference) keeps the settings it started with; changing the
method, the policy or one of its parameters, k, the temperature or any other setting of the
Decoding panel meanwhile puts one line on the status bar ("draft length k 6 applies to the
next run; …") instead of changing nothing in silence. While nothing runs a change needs no
word.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import SignalInstance
from PySide6.QtWidgets import QStatusBar

from app.session import Activity, Session
from app.widgets.decoding_panel import DecodingPanel

NOTE_MS = 8000
KEPT = "the run in progress keeps the settings it started with"


class NextRunNote:
    def __init__(self, session: Session, decoding: DecodingPanel, bar: QStatusBar) -> None:
        self.session, self.bar = session, bar
        self.last = ""  # the last note shown
        d = decoding
        watched: list[tuple[SignalInstance, str, Callable[[], str]]] = [
            (d.method.currentIndexChanged, "method", d.method.currentText),
            (d.policy.currentIndexChanged, "policy", d.policy.currentText),
            (d.k.valueChanged, "draft length k", lambda: str(d.k.value())),
            (d.temperature.valueChanged, "temperature", lambda: f"{d.temperature.value():g}"),
            (d.top_p.valueChanged, "top-p", d.top_p.text),
            (d.max_new_tokens.valueChanged, "max new tokens", d.max_new_tokens.text),
            (d.seed.valueChanged, "seed", d.seed.text),
            (d.tree_depth.valueChanged, "tree depth", d.tree_depth.text),
            (d.tree_topk.valueChanged, "tree top-k", d.tree_topk.text),
            (d.tree_tokens.valueChanged, "tree size", d.tree_tokens.text),
        ]
        for signal, name, value in watched:
            signal.connect(lambda *_, name=name, value=value: self.changed(name, value()))
        d.policy_param_changed.connect(
            lambda name, value: self.changed(f"policy parameter {name}", f"{value:g}")
        )

    def changed(self, name: str, value: str) -> None:
        if self.session.activity is Activity.RUNNING:
            self.last = f"{name} {value} applies to the next run; {KEPT}"
            self.bar.showMessage(self.last, NOTE_MS)
