"""Token view and legend: one colour per token kind, a tooltip per token, rejected drafts."""

from __future__ import annotations

from dataclasses import replace

from app.palette import KIND_COLORS, KIND_LABELS
from app.widgets.legend import Legend
from app.widgets.token_view import TokenView
from specdec_core.decoding.events import Step, StepPhases, Token, TokenKind
from tests.gui_fake import fake_step


def _all_kinds_step() -> Step:
    tokens = (
        Token(1, "The", TokenKind.ACCEPTED_DRAFT, 3, 0.91, 0.85),
        Token(2, " cat", TokenKind.CORRECTION, 3, 0.42, None),
        Token(3, " sat", TokenKind.BONUS, 3, 0.77, None),
        Token(4, " down", TokenKind.TARGET, 3, 0.66, None),
    )
    rejected = (Token(9, " dog", TokenKind.REJECTED_DRAFT, 3, 0.0, 0.3),)
    return Step(3, tokens, 2, 1, rejected=rejected)


def test_each_token_kind_gets_its_colour_and_tooltip(qtbot):
    view = TokenView()
    qtbot.addWidget(view)
    view.set_show_rejected(True)
    view.add_step(_all_kinds_step())

    kinds = [t.kind for t in view.tokens]
    assert kinds == [
        TokenKind.ACCEPTED_DRAFT,
        TokenKind.REJECTED_DRAFT,  # shown right after the accepted prefix it competed with
        TokenKind.CORRECTION,
        TokenKind.BONUS,
        TokenKind.TARGET,
    ]
    for index, token in enumerate(view.tokens):
        fmt = view.format_of(index)
        if token.kind is TokenKind.REJECTED_DRAFT:
            assert fmt.fontStrikeOut()
            assert fmt.foreground().color().name() == KIND_COLORS[token.kind].lower()
        else:
            assert not fmt.fontStrikeOut()
            assert fmt.background().color().name() == KIND_COLORS[token.kind].lower()
        tip = fmt.toolTip()
        assert KIND_LABELS[token.kind] in tip
        assert f"step {token.step}" in tip
        assert "p_target" in tip and "q_draft" in tip
    assert "p_target = 0.910" in view.format_of(0).toolTip()
    assert "q_draft = 0.850" in view.format_of(0).toolTip()
    assert "q_draft = —" in view.format_of(2).toolTip()
    assert view.toPlainText() == "The dog cat sat down"


def test_the_tooltip_lookup_finds_the_token_under_a_position(qtbot):
    view = TokenView()
    qtbot.addWidget(view)
    view.add_step(_all_kinds_step())
    text = view.toPlainText()  # "The cat sat down"
    assert view.token_at(text.index("cat")).text == " cat"
    assert view.token_at(0).text == "The"
    assert view.token_at(len(text)) is None


def test_rejected_drafts_are_hidden_until_asked_for_and_the_text_streams_per_step(qtbot):
    view = TokenView()
    qtbot.addWidget(view)
    for index in range(3):
        view.add_step(fake_step(index, "classic"))
    assert all(t.kind is not TokenKind.REJECTED_DRAFT for t in view.tokens)
    shown = len(view.tokens)
    view.set_show_rejected(True)
    rejected = [t for t in view.tokens if t.kind is TokenKind.REJECTED_DRAFT]
    assert len(rejected) == 3 and len(view.tokens) == shown + 3
    view.set_show_rejected(False)
    assert len(view.tokens) == shown
    view.clear_tokens()
    assert view.toPlainText() == "" and view.tokens == []


def test_the_legend_has_one_chip_per_kind_in_its_colour(qtbot):
    legend = Legend()
    qtbot.addWidget(legend)
    assert set(legend.chips) == set(TokenKind)
    for kind, chip in legend.chips.items():
        assert KIND_COLORS[kind] in chip.styleSheet()
        assert chip.text() == KIND_LABELS[kind]


def test_the_summary_line_names_tau_speed_end_reason_and_tree_size():
    from app.widgets.output_panel import summary_details, summary_text
    from specdec_core.decoding.events import RunSummary

    summary = RunSummary(
        method="eagle2",
        policy="threshold",
        lossy=True,
        prompt_tokens=5,
        new_tokens=30,
        token_ids=(),
        text="",
        steps=10,
        wall_seconds=2.0,
        phases=StepPhases(draft=0.5, target=1.0),
        prefill_seconds=0.1,
        stop_reason="eos",
        config={"tree_tokens": 12, "tree_depth": 4, "tree_topk": 3, "tree_sizing": "measured"},
    )
    text = summary_text("EAGLE-2", summary)
    assert "τ = 3.00" in text and "15.0 tokens/s" in text and "end of text" in text
    assert "LOSSY" in text
    assert "draft tree: 12 tokens, 4 deep, 3 branches per node (as set" in text
    assert "measured" not in text and summary_details(summary) == "tree sizing: measured"
    auto = replace(summary, config={**summary.config, "tree_sizing": "auto: E[tau] 2.56 …"})
    assert "sized for this machine" in summary_text("EAGLE-2", auto)
    assert "E[tau]" not in summary_text("EAGLE-2", auto) and "E[tau]" in summary_details(auto)


def test_the_summary_says_how_a_draft_drafts_and_which_layers_a_self_draft_skips():
    from app.widgets.output_panel import summary_text
    from specdec_core.decoding.events import RunSummary

    base = RunSummary("classic", "lossless", False, 5, 4, (), "", 2, 1.0, 0.1, "eos")
    algorithm = {"draft_algorithm": "universal assisted generation (T = 0)"}
    text = summary_text("Classic", replace(base, config=algorithm))
    assert "draft model: universal assisted generation (T = 0)" in text
    skips = {"skipped_layers": [3, 4], "skipped_attention": [], "skipped_mlp": [7]}
    text = summary_text("SWIFT", replace(base, config=skips))
    assert "drafts skipping: layers 3, 4; MLP of 7" in text
    searching = {"skipped_layers": [], "skipped_attention": [], "skipped_mlp": []}
    assert "drafts skipping: nothing yet" in summary_text("SWIFT", replace(base, config=searching))


def test_the_tree_line_says_how_deep_merged_branches_took_the_trees_beside_the_plot(tiny_target):
    """EAGLE-2 + lookup sized to a 2-token tree one deep: the lookup's chain merged into it
    makes the trees the plot draws deeper than that, and the line says so."""
    from app.widgets.output_panel import summary_text
    from specdec_core.decoding.config import DecodeConfig
    from specdec_core.run.runner import run
    from tests.eagle_tiny import tiny_head
    from tests.tiny import prompt

    config = DecodeConfig(max_new_tokens=40, tree_depth=1, tree_topk=1, tree_tokens=2)
    head = tiny_head(tiny_target)
    summary = run(tiny_target, "eagle2-lookup", prompt(length=6), config, head)
    deepest = len(summary.drafted_per_position)
    assert summary.config["tree_depth"] == 1 and deepest > 1
    text = summary_text("EAGLE-2 + lookup", summary)
    assert "draft tree: 2 tokens, 1 deep, 1 branch per node (as set" in text
    assert f"its trees went up to {deepest} deep" in text
    plain = summary_text("EAGLE-2", replace(summary, drafted_per_position=(summary.steps,)))
    assert "went up to" not in plain  # no merge: the sized tree is all there is
