"""The drafter's live status under the output: the layers a self-speculative draft skips,
SWIFT's layer-set search as it runs, lookahead's n-gram pool, and the run's acceptance so far.

Fed by each `Step` (its `status`, `events.DrafterStatus`); hidden while the run's drafter
publishes none. `StatusTokenView` is the token view that feeds it: the Output tab, each Compare
column and each chat reply show the line under their tokens.
"""

from __future__ import annotations

from PySide6.QtWidgets import QLabel, QWidget

from app.widgets.token_view import TokenView
from specdec_core.decoding.events import DrafterStatus, SearchState, SkippedLayers, Step

SEARCH_STATES = {
    SearchState.WAITING: "waiting for context",
    SearchState.SEARCHING: "searching",
    SearchState.REACHED: "fixed: target score reached",
    SearchState.STALLED: "fixed: no better set found",
    SearchState.EXHAUSTED: "fixed: all iterations used",
}


def _numbers(layers: tuple[int, ...]) -> str:
    return ", ".join(map(str, layers))


def skipped_text(skipped: SkippedLayers) -> str:
    """'skipping layers 3, 5 · attention of 4 · MLP of 7 (of 30 layers)'."""
    parts = [
        f"{name} {_numbers(layers)}"
        for name, layers in (
            ("layers", skipped.layers),
            ("attention of", skipped.attention),
            ("MLP of", skipped.mlp),
        )
        if layers
    ]
    what = " · ".join(parts) if parts else "nothing"
    return f"skipping {what} (of {skipped.num_layers} layers)"


def status_line(status: DrafterStatus, acceptance: float | None = None) -> str:
    """The status in one line; `acceptance` (accepted / drafted so far) is appended."""
    parts: list[str] = []
    if status.skipped is not None:
        parts.append(skipped_text(status.skipped))
    if status.search is not None:
        search = status.search
        text = f"search {search.iterations}/{search.max_iterations} {SEARCH_STATES[search.state]}"
        if search.best_score is not None:
            text += f", best match {search.best_score:.2f}"
        parts.append(text)
    if status.pool is not None:
        pool = status.pool
        parts.append(
            f"lookahead window {pool.window}, {pool.ngram_size}-grams · pool {pool.ngrams} n-grams"
        )
    if acceptance is not None:
        parts.append(f"acceptance {acceptance:.2f}")
    return " · ".join(parts)


class DrafterStatusLabel(QLabel):
    """One line, updated by every `Step` of the run shown (`add_step`), emptied by `clear`."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWordWrap(True)
        self.setToolTip(
            "the drafter's own state after the latest step; acceptance: drafted tokens the "
            "target accepted so far"
        )
        self.clear()

    def clear(self) -> None:
        super().clear()
        self.drafted = self.accepted = 0
        self.setVisible(False)

    def add_step(self, step: Step) -> None:
        self.drafted += step.drafted
        self.accepted += step.accepted
        if step.status is None:
            return
        acceptance = self.accepted / self.drafted if self.drafted else None
        self.setText(status_line(step.status, acceptance))
        self.setVisible(True)


class StatusTokenView(TokenView):
    """The token view that also feeds every step it shows to the drafter's status line (and
    empties it with the tokens), so whoever streams steps into the view updates both."""

    def __init__(self, status: DrafterStatusLabel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.status = status

    def clear_tokens(self) -> None:
        super().clear_tokens()
        self.status.clear()

    def add_step(self, step: Step) -> None:
        super().add_step(step)
        self.status.add_step(step)
