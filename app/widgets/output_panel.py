"""Output tab: colour legend, the token view, the drafter's live status (the layers a
self-speculative draft skips, SWIFT's search, lookahead's pool: app/widgets/drafter_status.py)
and a one-line summary of the finished run."""

from __future__ import annotations

from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from app.widgets.drafter_status import DrafterStatusLabel, StatusTokenView
from app.widgets.legend import Legend
from specdec_core.decoding.events import RunSummary, Step

STOP_REASONS = {
    "eos": "end of text",
    "max_tokens": "max new tokens reached",
    "stopped": "stopped by the user",
    "context": "context window full",
}


def summary_text(label: str, summary: RunSummary) -> str:
    """The run in plain words (the tree's sizing arithmetic is `summary_details`, on hover)."""
    lossy = " · LOSSY policy" if summary.lossy else ""
    reason = STOP_REASONS.get(summary.stop_reason, summary.stop_reason)
    text = (
        f"{label}: {summary.new_tokens} tokens in {summary.steps} target forwards · "
        f"τ = {summary.mean_accept_length:.2f} · {summary.tokens_per_second:.1f} tokens/s · "
        f"ended: {reason}{lossy}"
    )
    c = summary.config
    if "tree_sizing" in c:  # a tree method reports the size it used
        text += "\n" + tree_words(summary)
    if "draft_algorithm" in c:  # a classic draft says how it drafts for this target
        text += f"\ndraft model: {c['draft_algorithm']}"
    if "skipped_layers" in c:  # self-speculation says which of the target's layers it skips
        parts = [
            f"{name} {', '.join(map(str, c.get(key) or [])) or '-'}"
            for name, key in (
                ("layers", "skipped_layers"),
                ("attention of", "skipped_attention"),
                ("MLP of", "skipped_mlp"),
            )
            if c.get(key)
        ]
        text += f"\ndrafts skipping: {'; '.join(parts) or 'nothing yet'}"
    return text


def tree_words(summary: RunSummary) -> str:
    """The tree a tree method grew, as sized, and how deep its trees went where a merge (a
    lookup or suffix branch) took them deeper than that: the tree plot beside it shows the
    whole tree, merged branches included."""
    c = summary.config
    how = "sized for this machine" if str(c["tree_sizing"]).startswith("auto") else "as set"
    topk = c.get("tree_topk")
    words = (
        f"draft tree: {c.get('tree_tokens')} tokens, {c.get('tree_depth')} deep, {topk} "
        f"branch{'' if topk == 1 else 'es'} per node ({how}; hover for why)"
    )
    deepest = len(summary.drafted_per_position)  # the deepest tree drafted, merges included
    sized = c.get("tree_depth")
    if isinstance(sized, int) and deepest > sized:
        words += f"; with the branches merged into it, its trees went up to {deepest} deep"
    return words


def summary_details(summary: RunSummary) -> str:
    """What the summary leaves out: how the tree was sized ('' for chains), a part per line:
    the expected gain, the step's modelled time and the forward costs it was sized with."""
    sizing = summary.config.get("tree_sizing")
    return "tree sizing: " + str(sizing).replace("; ", "\n") if sizing else ""


class OutputPanel(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.drafter_status = DrafterStatusLabel()
        self.view = StatusTokenView(self.drafter_status)
        self.show_rejected = QCheckBox("show rejected drafts")
        self.show_rejected.setToolTip("show each step's first rejected draft, struck through")
        self.summary = QLabel("")
        self.summary.setWordWrap(True)
        rejected_row = QHBoxLayout()  # on its own row: the legend alone sets the width
        rejected_row.addStretch(1)
        rejected_row.addWidget(self.show_rejected)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(Legend())
        layout.addLayout(rejected_row)
        layout.addWidget(self.view, 1)
        layout.addWidget(self.drafter_status)
        layout.addWidget(self.summary)

    def clear(self) -> None:
        self.view.clear_tokens()
        self.summary.setText("")

    def add_step(self, step: Step) -> None:
        """A step of the run shown: its tokens, and the drafter's status it carries."""
        self.view.add_step(step)

    def show_summary(self, label: str, summary: RunSummary) -> None:
        self.summary.setText(summary_text(label, summary))
        self.summary.setToolTip(summary_details(summary))
