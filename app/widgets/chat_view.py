"""The Chat tab: turns listed as in a chat app, each reply coloured by who produced its tokens,
with τ, the speedup over its autoregressive reference (with its 95 % interval over both runs'
steps, and where the reference comes from when it was reused; a ratio above τ is shown as a
timing disturbance; while the reference is measured in the background, a note says so) and
what the kept conversation cache saved; Clear, Edit last turn, Regenerate, Save and Load."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from app.reference import RunSpeedup
from app.widgets.drafter_status import DrafterStatusLabel, StatusTokenView
from specdec_core.decoding.events import RunSummary, Step

USER_STYLE = "background:#eef2f7; border-radius:6px; padding:6px;"


def turn_summary(
    label: str, summary: RunSummary, speedup: RunSpeedup | None, note: str = ""
) -> str:
    """The line under a reply: τ, tokens/s, the speedup with its 95 % interval and, when its
    reference was reused, where from (or why a disturbed one is not shown; without one,
    `note`: why there is none yet), what the conversation cache saved."""
    ratio = f" · {note}" if note else ""
    if speedup is not None and speedup.disturbed:
        ratio = f" · speedup not shown: {speedup.bound.why()} (Regenerate re-measures it)"
    elif speedup is not None:
        parts = [f"95% interval {speedup.interval_text()}"] if speedup.interval else []
        if speedup.reused:
            parts.append(speedup.source)
        spread = f" ({'; '.join(parts)})" if parts else ""
        ratio = f" · ×{speedup.ratio:.2f} vs autoregressive{spread}"
    fresh = summary.prompt_tokens - summary.reused_tokens
    cache = (
        f" · prefilled {fresh} new of {summary.prompt_tokens} prompt tokens "
        f"({summary.reused_tokens} from the kept conversation)"
        if summary.reused_tokens
        else f" · prefilled all {summary.prompt_tokens} prompt tokens"
    )
    return (
        f"{label}: τ {summary.mean_accept_length:.2f} · {summary.tokens_per_second:.1f} tok/s"
        f"{ratio}{cache}"
    )


class TurnWidget(QFrame):
    """One turn: the user's message, then the reply as a token view, the drafter's live status
    line (app/widgets/drafter_status.py) and its summary line."""

    def __init__(self, user: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.user = QLabel(user)
        self.user.setWordWrap(True)
        self.user.setStyleSheet(USER_STYLE)
        self.user.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.status = DrafterStatusLabel()
        self.reply = StatusTokenView(self.status)
        self.reply.setPlaceholderText("…")
        self.reply.setMinimumHeight(60)
        self.reply.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.summary = QLabel("")
        self.summary.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 4, 0, 4)
        layout.addWidget(self.user)
        layout.addWidget(self.reply)
        layout.addWidget(self.status)
        layout.addWidget(self.summary)

    def show_text(self, text: str) -> None:
        """A saved reply (not measured): plain text."""
        self.reply.setPlainText(text)


class ChatView(QWidget):
    clear_requested = Signal()
    edit_requested = Signal()
    regenerate_requested = Signal()
    save_requested = Signal()
    load_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.turns: list[TurnWidget] = []
        self._list = QVBoxLayout()
        self._list.addStretch(1)
        inner = QWidget()
        inner.setLayout(self._list)
        self.scroll = QScrollArea()
        self.scroll.setWidgetResizable(True)
        self.scroll.setWidget(inner)
        self.hint = QLabel(
            "Chat: type a message in the prompt box and press Generate (Ctrl+Return). The "
            "template is applied over the whole conversation; each turn reuses the earlier "
            "turns' cache."
        )
        self.hint.setWordWrap(True)
        buttons = QHBoxLayout()
        self.buttons: dict[str, QPushButton] = {}
        actions = (
            ("clear", "Clear", "start a new conversation", self.clear_requested),
            ("edit", "Edit last turn", "put the last message back in the prompt box",
             self.edit_requested),
            ("regenerate", "Regenerate", "answer the last message again",
             self.regenerate_requested),
            ("save", "Save…", "save the chat as JSON (a prompt file with its turns)",
             self.save_requested),
            ("load", "Load…", "load a saved chat or a prompt file's turns", self.load_requested),
        )  # fmt: skip
        for name, text, tip, signal in actions:
            button = QPushButton(text)
            button.setToolTip(tip)
            button.clicked.connect(signal)
            buttons.addWidget(button)
            self.buttons[name] = button
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.hint)
        layout.addWidget(self.scroll, 1)
        layout.addLayout(buttons)

    def clear(self) -> None:
        for turn in self.turns:
            turn.deleteLater()
        self.turns.clear()

    def add_turn(self, user: str) -> TurnWidget:
        turn = TurnWidget(user)
        self._list.insertWidget(self._list.count() - 1, turn)
        self.turns.append(turn)
        return turn

    def remove_last(self) -> None:
        if self.turns:
            self.turns.pop().deleteLater()

    def add_step(self, step: Step) -> None:
        if self.turns:
            self.turns[-1].reply.add_step(step)
            bar = self.scroll.verticalScrollBar()
            bar.setValue(bar.maximum())

    def finish(
        self, label: str, summary: RunSummary, speedup: RunSpeedup | None, note: str = ""
    ) -> None:
        if self.turns:
            self.turns[-1].summary.setText(turn_summary(label, summary, speedup, note))

    def set_busy(self, busy: bool) -> None:
        for button in self.buttons.values():
            button.setEnabled(not busy)
