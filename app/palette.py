"""Colours and labels: one colour per token kind, one per method (colour-blind safe hues)."""

from __future__ import annotations

from specdec_core.decoding.events import Token, TokenKind

KIND_COLORS: dict[TokenKind, str] = {
    TokenKind.ACCEPTED_DRAFT: "#9be3b0",  # green: the drafter's token, accepted
    TokenKind.CORRECTION: "#ffb199",  # orange-red: the target overruled the draft
    TokenKind.BONUS: "#9cc8ff",  # blue: free extra token after a fully accepted draft
    TokenKind.TARGET: "#e4e4e4",  # grey: plain autoregressive token
    TokenKind.REJECTED_DRAFT: "#c1121f",  # red text, struck through (display only)
}

REFERENCE_COLOR = "#8a8a8a"  # the autoregressive reference run of a single Generate

KIND_LABELS: dict[TokenKind, str] = {
    TokenKind.ACCEPTED_DRAFT: "accepted draft",
    TokenKind.CORRECTION: "correction",
    TokenKind.BONUS: "bonus",
    TokenKind.TARGET: "target",
    TokenKind.REJECTED_DRAFT: "rejected draft",
}

KIND_HELP: dict[TokenKind, str] = {
    TokenKind.ACCEPTED_DRAFT: "proposed by the drafter and accepted by the target",
    TokenKind.CORRECTION: "the target's own token where it rejected the draft",
    TokenKind.BONUS: "a free extra token from the target after a fully accepted draft",
    TokenKind.TARGET: "a plain token of the target (autoregressive, nothing drafted)",
    TokenKind.REJECTED_DRAFT: "a draft the target rejected (display only, not in the output)",
}

TEXT_COLOR = "#1b1b1b"

# Okabe-Ito; autoregressive is always the neutral grey.
METHOD_COLORS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#8C6D31")
AR_COLOR = "#6b6b6b"


def token_tooltip(token: Token) -> str:
    q = "—" if token.q_draft is None else f"{token.q_draft:.3f}"
    p = "—" if token.kind is TokenKind.REJECTED_DRAFT else f"{token.p_target:.3f}"
    return (
        f"{KIND_LABELS[token.kind]} · step {token.step}\n"
        f"p_target = {p}\nq_draft = {q}\n"
        f"token {token.id}: {token.text!r}"
    )
