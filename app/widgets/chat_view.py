"""The Chat tab: the conversation as bubbles, as in a chat app.

The user's messages sit on the right; each reply on the left streams in as tokens coloured by
who produced them, in a bubble as tall as its text, and once it ends it is shown as markdown
(headings, lists, code) with **Copy** (the reply's text to the clipboard) and **Tokens** (back
to the coloured tokens). Under it, small: τ, tokens/s, the speedup over its autoregressive
reference (with its 95 % interval over both runs' steps, and where the reference comes from
when it was reused; a ratio above τ is shown as a timing disturbance; while the reference is
measured in the background, a note says so and the line is filled in later) and what the kept
conversation cache saved; a reply cut by Stop says so.

Above the conversation: the saved conversations (newest first; **New**, **Delete**), the
system prompt and how long a reply may get; under it Edit last turn, Regenerate, Save… and
Load… (a chat as a prompt file)."""

from __future__ import annotations

from PySide6.QtCore import QSizeF, Qt, Signal
from PySide6.QtGui import QColor, QFont, QGuiApplication, QResizeEvent, QTextCursor
from PySide6.QtWidgets import (
    QComboBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSpinBox,
    QTextBrowser,
    QTextEdit,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.chat import ReplyNumbers
from app.chat_store import SavedChat
from app.reference import RunSpeedup
from app.widgets.drafter_status import DrafterStatusLabel, StatusTokenView
from specdec_core.decoding.events import RunSummary, Step

USER_STYLE = "background:#dbe8fb; border-radius:10px; padding:6px 10px; color:#111;"
REPLY_STYLE = "#reply { background:#f2f3f5; border-radius:10px; }"
LINE_STYLE = "color:#666;"
STOPPED = "stopped"
CODE_BACKGROUND = "#e4e6ea"
ENDS = {  # why a reply ended, where it is not its end of turn
    "max_tokens": "cut at the reply cap ({n} tokens; raise it above)",
    "context": "cut: the model's context is full",
    "stopped": STOPPED + " after {n} tokens",
}
USER_SHARE = 0.8  # the widest a user's bubble gets, of the row
USER_PADDING = 26  # its padding and border, both sides
MAX_REPLY_TOKENS = 32_768  # the cap's upper end (a model's context ends a reply before it)
DEFAULT_REPLY_TOKENS = 512
SETTINGS = ("system_prompt", "chat_max_new_tokens")  # what the view gives the saved settings


def turn_summary(
    label: str, summary: RunSummary, speedup: RunSpeedup | None, note: str = ""
) -> str:
    """The line under a reply: τ, tokens/s, the speedup with its 95 % interval and, when its
    reference was reused, where from (or why a disturbed one is not shown; without one,
    `note`: why there is none yet), what the conversation cache saved, and why it ended
    where that was not its end of turn (Stop, the reply cap, the context)."""
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
        f" · prefilled {fresh} of {summary.prompt_tokens} prompt tokens "
        f"({summary.reused_tokens} from the kept conversation)"
        if summary.reused_tokens
        else f" · prefilled all {summary.prompt_tokens} prompt tokens"
    )
    end = ENDS.get(summary.stop_reason, "")
    ended = f" · {end.format(n=summary.new_tokens)}" if end else ""
    return (
        f"{label}: τ {summary.mean_accept_length:.2f} · {summary.tokens_per_second:.1f} tok/s"
        f"{ended}{ratio}{cache}"
    )


def saved_summary(numbers: ReplyNumbers | None, stopped: bool) -> str:
    """The line under a reply of a conversation opened again: what was saved with it."""
    cut = f" · {STOPPED}" if stopped else ""
    if numbers is None:
        return f"saved reply{cut}"
    ratio = ""
    if numbers.speedup is not None:
        low_high = (
            f"{numbers.interval[0]:.2f}–{numbers.interval[1]:.2f}" if numbers.interval else ""
        )
        spread = f" (95% interval {low_high})" if low_high else ""
        ratio = f" · ×{numbers.speedup:.2f} vs autoregressive{spread}"
    return (
        f"saved reply · {numbers.method}: τ {numbers.tau:.2f} · "
        f"{numbers.tokens_per_second:.1f} tok/s · {numbers.new_tokens} tokens{cut}{ratio}"
    )


def fit_to_text(view: QTextEdit) -> None:
    """`view` as tall as its text at its width, always (no scroll bar of its own)."""
    view.setFrameShape(QFrame.Shape.NoFrame)
    view.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
    view.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
    view.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
    view.viewport().setAutoFillBackground(False)
    view.setStyleSheet("background:transparent;")

    def fit(size: QSizeF) -> None:
        margins = view.contentsMargins()
        lines = max(size.height(), view.fontMetrics().lineSpacing() + 8)
        view.setFixedHeight(int(lines) + margins.top() + margins.bottom() + 2)

    view.document().documentLayout().documentSizeChanged.connect(fit)
    fit(view.document().size())


class ReplyTokens(StatusTokenView):
    """The reply's coloured tokens, as tall as its text."""

    def __init__(self, status: DrafterStatusLabel, parent: QWidget | None = None) -> None:
        super().__init__(status, parent)
        fit_to_text(self)


class ReplyMarkdown(QTextBrowser):
    """An ended reply rendered as markdown (Qt's CommonMark with GitHub's tables and task
    lists), as tall as its text; links open in the browser."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setOpenExternalLinks(True)
        self.setFont(QFont("DejaVu Sans", 11))
        fit_to_text(self)

    def show_markdown(self, text: str) -> None:
        """`text` rendered; a code block wraps at the bubble's width (it has no scroll bar)
        on a shaded background."""
        self.setMarkdown(text)
        block = self.document().begin()
        while block.isValid():
            layout = block.blockFormat()
            if layout.nonBreakableLines():
                layout.setNonBreakableLines(False)
                layout.setBackground(QColor(CODE_BACKGROUND))
                QTextCursor(block).setBlockFormat(layout)
            block = block.next()


class TurnWidget(QFrame):
    """One turn: the user's message (right), the reply (left) as coloured tokens while it
    streams, then as markdown; the drafter's live status line (app/widgets/drafter_status.py);
    the small line under it; Copy and Tokens."""

    def __init__(self, user: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.text = ""  # the reply's text, once it has ended
        self.user = QLabel(user)
        self.user.setWordWrap(True)
        self.user.setStyleSheet(USER_STYLE)
        self.user.setTextFormat(Qt.TextFormat.PlainText)
        self.user.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.user.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)
        self.status = DrafterStatusLabel()
        self.reply = ReplyTokens(self.status)
        self.reply.setPlaceholderText("…")
        self.markdown = ReplyMarkdown()
        self.markdown.hide()
        bubble = QFrame()
        bubble.setObjectName("reply")
        bubble.setStyleSheet(REPLY_STYLE)
        inside = QVBoxLayout(bubble)
        inside.setContentsMargins(8, 6, 8, 6)
        inside.setSpacing(2)
        inside.addWidget(self.reply)
        inside.addWidget(self.markdown)
        inside.addWidget(self.status)
        self.copy_button = _small_button("Copy", "copy the reply's text to the clipboard")
        self.copy_button.clicked.connect(self.copy)
        self.tokens_button = _small_button(
            "Tokens", "show the reply's tokens coloured by who produced them (again: markdown)"
        )
        self.tokens_button.setCheckable(True)
        self.tokens_button.toggled.connect(self.show_tokens)
        for button in (self.copy_button, self.tokens_button):
            button.setEnabled(False)
        self.summary = QLabel("")
        self.summary.setWordWrap(True)
        self.summary.setStyleSheet(LINE_STYLE)
        small = QFont(self.summary.font())
        small.setPointSizeF(max(small.pointSizeF() - 1.5, 7.0))
        self.summary.setFont(small)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        under = QHBoxLayout()
        under.setContentsMargins(6, 0, 0, 0)
        under.addWidget(self.summary, 1)
        under.addWidget(self.copy_button, 0, Qt.AlignmentFlag.AlignTop)
        under.addWidget(self.tokens_button, 0, Qt.AlignmentFlag.AlignTop)
        asked = QHBoxLayout()
        asked.addStretch(1)
        asked.addWidget(self.user)
        answered = QHBoxLayout()
        answered.addWidget(bubble, 12)
        answered.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 6, 0, 6)
        layout.setSpacing(4)
        layout.addLayout(asked)
        layout.addLayout(answered)
        layout.addLayout(under)

    def resizeEvent(self, event: QResizeEvent) -> None:
        """The user's bubble hugs a short message and wraps a long one at 80 % of the row."""
        widest = int(event.size().width() * USER_SHARE)
        lines = self.user.text().splitlines() or [""]
        metrics = self.user.fontMetrics()
        natural = max(metrics.horizontalAdvance(line) for line in lines) + USER_PADDING
        self.user.setFixedWidth(max(min(natural, widest), 1))
        super().resizeEvent(event)

    def finish(self, text: str, line: str) -> None:
        """The reply ended: its text as markdown, `line` under it."""
        self.text = text
        self.markdown.show_markdown(text)
        self.summary.setText(line)
        self.copy_button.setEnabled(True)
        self.tokens_button.setEnabled(bool(self.reply.tokens))
        self.show_tokens(self.tokens_button.isChecked())

    def show_text(self, text: str, line: str = "") -> None:
        """A saved reply: markdown only (its tokens were not kept)."""
        self.reply.setPlainText(text)
        self.finish(text, line)
        self.tokens_button.setToolTip("a saved reply keeps its text, not its tokens")

    def show_tokens(self, tokens: bool) -> None:
        """The coloured tokens (`tokens`) or the markdown of an ended reply."""
        ended = self.copy_button.isEnabled()
        self.markdown.setVisible(ended and not tokens)
        self.reply.setVisible(not ended or tokens)

    def copy(self) -> None:
        QGuiApplication.clipboard().setText(self.text or self.reply.toPlainText())


def _small_button(text: str, tip: str) -> QToolButton:
    button = QToolButton()
    button.setText(text)
    button.setToolTip(tip)
    button.setAutoRaise(True)
    return button


class ChatView(QWidget):
    clear_requested = Signal()  # New: a new conversation (the one shown stays saved)
    edit_requested = Signal()
    regenerate_requested = Signal()
    save_requested = Signal()
    load_requested = Signal()
    open_requested = Signal(str)  # a saved conversation's key
    delete_requested = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.turns: list[TurnWidget] = []
        self._list = QVBoxLayout()
        self._list.setContentsMargins(8, 4, 8, 4)
        self._list.addStretch(1)
        inner = QWidget()
        inner.setLayout(self._list)
        self.scroll = QScrollArea()
        self.scroll.setWidgetResizable(True)
        self.scroll.setWidget(inner)
        self.scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.hint = QLabel(
            "Type a message in the prompt box and press Generate (Ctrl+Return). Each reply "
            "ends at the model's end of turn; the conversation is saved as you go."
        )
        self.hint.setWordWrap(True)
        self.hint.setStyleSheet(LINE_STYLE)
        self._list.insertWidget(0, self.hint)
        self.conversations = QComboBox()
        self.conversations.setToolTip("the saved conversations, newest first: pick one to open")
        self.conversations.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
        )
        self.conversations.setMinimumContentsLength(16)
        self.conversations.activated.connect(self._picked)
        self.system = QLineEdit()
        self.system.setPlaceholderText("System prompt (optional): how the assistant answers")
        self.system.setToolTip(
            "the system message every turn is asked with, under the model's chat template"
        )
        self.max_tokens = QSpinBox()
        self.max_tokens.setRange(1, MAX_REPLY_TOKENS)
        self.max_tokens.setValue(DEFAULT_REPLY_TOKENS)
        self.max_tokens.setPrefix("≤ ")
        self.max_tokens.setSuffix(" tokens")
        self.max_tokens.setToolTip(
            "a reply ends at the model's end-of-turn token, or at this many tokens"
        )
        self.buttons: dict[str, QPushButton] = {}
        top = QHBoxLayout()
        top.addWidget(self.conversations, 1)
        top.addWidget(self._button("clear", "New", "start a new conversation (this one stays "
                                   "saved)", self.clear_requested))  # fmt: skip
        delete = self._button("delete", "Delete", "delete the conversation shown", None)
        delete.clicked.connect(self._delete)
        top.addWidget(delete)
        second = QHBoxLayout()
        second.addWidget(self.system, 1)
        second.addWidget(QLabel("Reply"))
        second.addWidget(self.max_tokens)
        bottom = QHBoxLayout()
        actions = (
            ("edit", "Edit last turn", "put the last message back in the prompt box",
             self.edit_requested),
            ("regenerate", "Regenerate", "answer the last message again",
             self.regenerate_requested),
            ("save", "Save…", "save the chat as JSON (a prompt file with its turns)",
             self.save_requested),
            ("load", "Load…", "load a saved chat or a prompt file's turns", self.load_requested),
        )  # fmt: skip
        for name, text, tip, signal in actions:
            bottom.addWidget(self._button(name, text, tip, signal))
        bottom.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(top)
        layout.addLayout(second)
        layout.addWidget(self.scroll, 1)
        layout.addLayout(bottom)
        self._keys: list[str] = []  # the list's conversations, in its order
        self.current = ""  # the key of the conversation shown ("": not saved yet)

    def _button(self, name: str, text: str, tip: str, signal) -> QPushButton:
        button = QPushButton(text)
        button.setToolTip(tip)
        if signal is not None:
            button.clicked.connect(signal)
        self.buttons[name] = button
        return button

    # -- settings ---------------------------------------------------------------------------
    def values(self) -> dict[str, object]:
        """The system prompt and the reply cap, by their settings' names."""
        return {"system_prompt": self.system.text(), "chat_max_new_tokens": self.max_tokens.value()}

    def apply(self, values: dict[str, object]) -> None:
        system, cap = values.get("system_prompt"), values.get("chat_max_new_tokens")
        if isinstance(system, str):
            self.system.setText(system)
        if isinstance(cap, int) and not isinstance(cap, bool):
            self.max_tokens.setValue(cap)

    # -- the saved conversations ----------------------------------------------------------------
    def set_conversations(self, saved: list[SavedChat], current: str) -> None:
        """The list: a new conversation (when the one shown is not saved yet), then `saved`;
        `current` selected."""
        self.current = current
        self.conversations.blockSignals(True)
        self.conversations.clear()
        self._keys = []
        if not any(s.key == current for s in saved):
            self.conversations.addItem("New conversation")
            self._keys.append("")
        for entry in saved:
            self.conversations.addItem(entry.label())
            self._keys.append(entry.key)
        self.conversations.setCurrentIndex(
            self._keys.index(current) if current in self._keys else 0
        )
        self.conversations.blockSignals(False)
        self.buttons["delete"].setEnabled(bool(current) and self.buttons["clear"].isEnabled())

    def listed(self) -> list[str]:
        """The keys of the saved conversations in the list, in its order."""
        return [key for key in self._keys if key]

    def _picked(self, index: int) -> None:
        key = self._keys[index] if 0 <= index < len(self._keys) else ""
        if key and key != self.current:
            self.open_requested.emit(key)

    def _delete(self) -> None:
        if self.current:
            self.delete_requested.emit(self.current)

    # -- turns ------------------------------------------------------------------------------
    def clear(self) -> None:
        for turn in self.turns:
            turn.deleteLater()
        self.turns.clear()
        self.hint.show()

    def add_turn(self, user: str) -> TurnWidget:
        turn = TurnWidget(user)
        self._list.insertWidget(self._list.count() - 1, turn)
        self.turns.append(turn)
        self.hint.hide()
        self._to_end()
        return turn

    def remove_last(self) -> None:
        if self.turns:
            self.turns.pop().deleteLater()
        self.hint.setVisible(not self.turns)

    def add_step(self, step: Step) -> None:
        if self.turns:
            self.turns[-1].reply.add_step(step)
            self._to_end()

    def _to_end(self) -> None:
        bar = self.scroll.verticalScrollBar()
        bar.setValue(bar.maximum())

    def finish(
        self, label: str, summary: RunSummary, speedup: RunSpeedup | None, note: str = ""
    ) -> None:
        """The last reply has ended (its markdown from now on) with this line under it; again
        when its speedup arrives."""
        if self.turns:
            self.turns[-1].finish(summary.text, turn_summary(label, summary, speedup, note))

    def set_busy(self, busy: bool) -> None:
        for button in self.buttons.values():
            button.setEnabled(not busy)
        self.conversations.setEnabled(not busy)
        self.buttons["delete"].setEnabled(not busy and bool(self.current))
