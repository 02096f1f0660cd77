"""Read-only text view of generated tokens, each coloured by its `TokenKind`, with a tooltip.

A step's accepted drafts are one run of green tokens, ended by the target's correction or bonus
token, whatever drafted them: a chain drafted token by token, a DFlash block drafted in one pass
or the accepted path of a tree (EAGLE-2, Medusa, DDTree). Each accepted draft's tooltip says so:
its place in the step's run and what the target verified at once (`draft_line`)."""

from __future__ import annotations

from bisect import bisect_right

from PySide6.QtCore import QEvent, QObject
from PySide6.QtGui import QColor, QFont, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QTextEdit, QToolTip, QWidget

from app.palette import KIND_COLORS, TEXT_COLOR, token_tooltip
from specdec_core.decoding.events import Step, Token, TokenKind


def draft_line(step: Step, position: int) -> str:
    """Where the step's `position`-th accepted draft sits: one run of the step's accepted
    drafts, from the one draft (a chain or block, or a tree) the target verified at once."""
    what = "a tree" if step.tree is not None else "one draft"
    return (
        f"accepted draft {position + 1} of {step.accepted} in step {step.index}, from {what} "
        f"of {step.drafted} token{'s' if step.drafted != 1 else ''} verified in one forward"
    )


def step_tooltips(step: Step, tokens: list[Token]) -> list[str]:
    """Each of the step's rendered `tokens`' tooltip: an accepted draft's with `draft_line`."""
    tips, accepted = [], 0
    for token in tokens:
        tip = token_tooltip(token)
        if token.kind is TokenKind.ACCEPTED_DRAFT:
            tip, accepted = f"{tip}\n{draft_line(step, accepted)}", accepted + 1
        tips.append(tip)
    return tips


def token_format(token: Token, tooltip: str | None = None) -> QTextCharFormat:
    fmt = QTextCharFormat()
    if token.kind is TokenKind.REJECTED_DRAFT:
        fmt.setForeground(QColor(KIND_COLORS[token.kind]))
        fmt.setFontStrikeOut(True)
    else:
        fmt.setForeground(QColor(TEXT_COLOR))
        fmt.setBackground(QColor(KIND_COLORS[token.kind]))
    fmt.setToolTip(token_tooltip(token) if tooltip is None else tooltip)
    return fmt


class TokenView(QTextEdit):
    """Streams tokens step by step; `show_rejected` re-renders with rejected drafts struck out."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setReadOnly(True)
        self.setUndoRedoEnabled(False)
        self.setFont(QFont("DejaVu Sans", 11))
        self.setPlaceholderText("Generated tokens appear here, coloured by who produced them.")
        self._steps: list[Step] = []
        self._show_rejected = False
        self._starts: list[int] = []  # document position where each rendered token starts
        self._tokens: list[Token] = []
        self._tips: list[str] = []  # each rendered token's tooltip
        self.viewport().installEventFilter(self)

    @property
    def tokens(self) -> list[Token]:
        """Rendered tokens in document order (rejected drafts included when shown)."""
        return list(self._tokens)

    @property
    def show_rejected(self) -> bool:
        return self._show_rejected

    def set_show_rejected(self, show: bool) -> None:
        if show == self._show_rejected:
            return
        self._show_rejected = show
        steps, self._steps = self._steps, []
        self.clear_tokens()
        for step in steps:
            self.add_step(step)

    def clear_tokens(self) -> None:
        self._steps.clear()
        self._starts.clear()
        self._tokens.clear()
        self._tips.clear()
        self.clear()

    def add_step(self, step: Step) -> None:
        self._steps.append(step)
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        tokens = list(step.tokens)
        if self._show_rejected and step.rejected:
            tokens[step.accepted : step.accepted] = list(step.rejected)
        for token, tip in zip(tokens, step_tooltips(step, tokens), strict=True):
            self._starts.append(cursor.position())
            self._tokens.append(token)
            self._tips.append(tip)
            cursor.insertText(token.text, token_format(token, tip))
        self.ensureCursorVisible()
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())

    def token_at(self, position: int) -> Token | None:
        """The token covering document `position`, if any."""
        index = self._index_at(position)
        return None if index is None else self._tokens[index]

    def tooltip_at(self, position: int) -> str | None:
        """The tooltip of the token covering document `position`, if any."""
        index = self._index_at(position)
        return None if index is None else self._tips[index]

    def _index_at(self, position: int) -> int | None:
        index = bisect_right(self._starts, position) - 1
        if index < 0:
            return None
        token = self._tokens[index]
        return index if position < self._starts[index] + len(token.text) else None

    def format_of(self, index: int) -> QTextCharFormat:
        """The character format rendered for the index-th token (for tests and tools)."""
        cursor = QTextCursor(self.document())
        cursor.setPosition(self._starts[index] + 1)
        return cursor.charFormat()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.viewport() and event.type() == QEvent.Type.ToolTip:
            position = self.cursorForPosition(event.pos()).position()
            tip = self.tooltip_at(position) or self.tooltip_at(position - 1)
            if tip is not None:
                QToolTip.showText(event.globalPos(), tip, self)
            else:
                QToolTip.hideText()
            return True
        return super().eventFilter(watched, event)
