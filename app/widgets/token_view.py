"""Read-only text view of generated tokens, each coloured by its `TokenKind`, with a tooltip."""

from __future__ import annotations

from bisect import bisect_right

from PySide6.QtCore import QEvent, QObject
from PySide6.QtGui import QColor, QFont, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QTextEdit, QToolTip, QWidget

from app.palette import KIND_COLORS, TEXT_COLOR, token_tooltip
from specdec_core.decoding.events import Step, Token, TokenKind


def token_format(token: Token) -> QTextCharFormat:
    fmt = QTextCharFormat()
    if token.kind is TokenKind.REJECTED_DRAFT:
        fmt.setForeground(QColor(KIND_COLORS[token.kind]))
        fmt.setFontStrikeOut(True)
    else:
        fmt.setForeground(QColor(TEXT_COLOR))
        fmt.setBackground(QColor(KIND_COLORS[token.kind]))
    fmt.setToolTip(token_tooltip(token))
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
        self.clear()

    def add_step(self, step: Step) -> None:
        self._steps.append(step)
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        tokens = list(step.tokens)
        if self._show_rejected and step.rejected:
            tokens[step.accepted : step.accepted] = list(step.rejected)
        for token in tokens:
            self._starts.append(cursor.position())
            self._tokens.append(token)
            cursor.insertText(token.text, token_format(token))
        self.ensureCursorVisible()
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())

    def token_at(self, position: int) -> Token | None:
        """The token covering document `position`, if any."""
        index = bisect_right(self._starts, position) - 1
        if index < 0:
            return None
        token = self._tokens[index]
        return token if position < self._starts[index] + len(token.text) else None

    def format_of(self, index: int) -> QTextCharFormat:
        """The character format rendered for the index-th token (for tests and tools)."""
        cursor = QTextCursor(self.document())
        cursor.setPosition(self._starts[index] + 1)
        return cursor.charFormat()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.viewport() and event.type() == QEvent.Type.ToolTip:
            position = self.cursorForPosition(event.pos()).position()
            token = self.token_at(position) or self.token_at(position - 1)
            if token is not None:
                QToolTip.showText(event.globalPos(), token_tooltip(token), self)
            else:
                QToolTip.hideText()
            return True
        return super().eventFilter(watched, event)
