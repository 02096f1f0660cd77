"""The Output tab's drafter status line: a Step's status shows there while the run goes."""

from __future__ import annotations

from app.widgets.output_panel import OutputPanel
from specdec_core.decoding.events import (
    DrafterStatus,
    PoolStatus,
    SearchProgress,
    SearchState,
    SkippedLayers,
    Step,
    Token,
    TokenKind,
)


def step(index: int, status: DrafterStatus | None, drafted: int = 4, accepted: int = 3) -> Step:
    token = Token(index, f" t{index}", TokenKind.BONUS, index, 0.9)
    return Step(index, (token,), drafted, accepted, status=status)


def swift(iterations: int, state: SearchState, best: float) -> DrafterStatus:
    skipped = SkippedLayers(30, layers=(3, 5, 9), attention=(12,))
    search = SearchProgress(state, iterations, 24, best_score=best, last_score=best)
    return DrafterStatus(skipped=skipped, search=search)


def test_a_step_with_a_status_updates_the_line_under_the_output(qtbot):
    panel = OutputPanel()
    qtbot.addWidget(panel)
    line = panel.drafter_status
    assert line.isHidden()  # nothing to show before a run

    panel.add_step(step(0, swift(12, SearchState.SEARCHING, 0.71), drafted=4, accepted=3))
    assert not line.isHidden()
    assert line.text() == (
        "skipping layers 3, 5, 9 · attention of 12 (of 30 layers) · "
        "search 12/24 searching, best match 0.71 · acceptance 0.75"
    )

    panel.view.add_step(step(1, swift(13, SearchState.REACHED, 0.93), drafted=4, accepted=1))
    assert "search 13/24 fixed: target score reached, best match 0.93" in line.text()
    assert line.text().endswith("acceptance 0.50")  # 4 of 8 drafted tokens accepted


def test_a_lookahead_step_shows_its_pool(qtbot):
    status = DrafterStatus(pool=PoolStatus(window=3, ngram_size=4, ngrams=17))
    panel = OutputPanel()
    qtbot.addWidget(panel)
    panel.add_step(step(0, status, drafted=5, accepted=1))
    assert panel.drafter_status.text() == (
        "lookahead window 3, 4-grams · pool 17 n-grams · acceptance 0.20"
    )


def test_clearing_the_output_hides_the_line_and_restarts_the_acceptance(qtbot):
    panel = OutputPanel()
    qtbot.addWidget(panel)
    panel.add_step(step(0, swift(1, SearchState.SEARCHING, 0.4), drafted=4, accepted=0))
    panel.clear()
    assert panel.drafter_status.isHidden() and panel.drafter_status.text() == ""
    panel.add_step(step(0, swift(2, SearchState.SEARCHING, 0.5), drafted=2, accepted=2))
    assert panel.drafter_status.text().endswith("acceptance 1.00")


def test_showing_rejected_drafts_does_not_count_the_steps_twice(qtbot):
    panel = OutputPanel()
    qtbot.addWidget(panel)
    panel.add_step(step(0, swift(1, SearchState.SEARCHING, 0.4), drafted=4, accepted=1))
    panel.add_step(step(1, swift(2, SearchState.SEARCHING, 0.6), drafted=4, accepted=3))
    panel.view.set_show_rejected(True)  # re-renders every step
    assert panel.drafter_status.text().endswith("acceptance 0.50")
    assert "search 2/24" in panel.drafter_status.text()


def test_a_method_without_a_status_leaves_the_line_hidden(qtbot):
    panel = OutputPanel()
    qtbot.addWidget(panel)
    panel.add_step(step(0, None))
    assert panel.drafter_status.isHidden()


def test_each_compare_column_shows_its_own_drafters_status(qtbot):
    from app.widgets.compare_columns import CompareColumns

    columns = CompareColumns()
    qtbot.addWidget(columns)
    columns.add_column("swift", "SWIFT", "#123456")
    columns.add_column("ngram", "n-gram", "#654321")
    columns.add_step("swift", step(0, swift(3, SearchState.SEARCHING, 0.6), drafted=4, accepted=2))
    columns.add_step("ngram", step(0, None))
    swift_line, ngram_line = columns.columns["swift"].status, columns.columns["ngram"].status
    assert not swift_line.isHidden()
    assert swift_line.text().startswith("skipping layers 3, 5, 9")
    assert swift_line.text().endswith("acceptance 0.50")
    assert ngram_line.isHidden()  # n-gram lookup publishes no status


def test_a_chat_reply_shows_the_status_under_its_tokens(qtbot):
    from app.widgets.chat_view import ChatView

    chat = ChatView()
    qtbot.addWidget(chat)
    chat.add_turn("hello")
    status = DrafterStatus(pool=PoolStatus(window=3, ngram_size=4, ngrams=9))
    chat.add_step(step(0, status, drafted=5, accepted=5))
    line = chat.turns[-1].status
    assert not line.isHidden()
    assert line.text() == "lookahead window 3, 4-grams · pool 9 n-grams · acceptance 1.00"
