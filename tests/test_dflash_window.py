"""DFlash and DDTree in the window: the method picker's "parallel drafting" family, the Models
panel's DFlash drafter picker (label, hover, default, the spec a run is given), the Decoding
panel's rows for each method, and the token view showing a DFlash block's accepted tokens as
one draft (a DDTree step's accepted path as any tree's)."""

from __future__ import annotations

from app.engine import SpecdecEngine
from app.widgets.decoding_panel import DecodingPanel
from app.widgets.models_panel import DFLASH_TIP, EXTRA_DEFAULTS, ModelsPanel
from app.widgets.token_view import TokenView, draft_line
from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.events import Step, TokenKind
from specdec_core.run.methods import FAMILIES
from specdec_core.run.runner import run
from tests.dflash_tiny import tiny_dflash
from tests.gui_fake import FakeEngine
from tests.gui_window import make_window_fixture  # noqa: F401  (fixture)
from tests.tiny import prompt


def _decoding(qtbot) -> DecodingPanel:
    panel = DecodingPanel()
    qtbot.addWidget(panel)
    panel.set_registries(SpecdecEngine().registries())
    return panel


def _groups(panel: DecodingPanel) -> dict[str, list[str]]:
    """The picker's headings, each with the method names listed under it."""
    groups: dict[str, list[str]] = {}
    heading = ""
    for index in range(panel.method.count()):
        name = panel.method.itemData(index)
        if name is None:
            heading = panel.method.itemText(index)
            groups[heading] = []
        else:
            groups[heading].append(name)
    return groups


def test_the_method_picker_lists_dflash_and_ddtree_under_parallel_drafting(qtbot):
    assert "parallel drafting" in FAMILIES
    panel = _decoding(qtbot)
    group = _groups(panel)["PARALLEL DRAFTING"]
    assert "dflash" in group and "ddtree" in group
    tips = {
        panel.method.itemData(i): panel.method.itemData(i, 3)  # Qt.ToolTipRole
        for i in range(panel.method.count())
    }
    assert "one non-causal pass" in tips["dflash"] and "best-first tree" in tips["ddtree"]


def test_dflash_has_no_k_and_ddtree_shows_its_tree_size(qtbot):
    panel = _decoding(qtbot)
    form = panel.form
    panel.select(panel.method, "dflash")
    assert not panel.k.isEnabled() and not form.isRowVisible(panel.tree_tokens)
    panel.select(panel.method, "ddtree")
    assert not panel.k.isEnabled() and form.isRowVisible(panel.tree_tokens)
    assert "DDTree's node budget" in panel.tree_tokens.toolTip()
    panel.tree_tokens.setValue(12)
    assert panel.config().tree_tokens == 12


def test_the_models_panel_offers_the_dflash_drafter_with_its_hover(qtbot):
    panel = ModelsPanel()
    qtbot.addWidget(panel)
    panel.show()
    picker = panel.extras["dflash"]
    assert panel.layout().labelForField(picker).text() == "DFlash drafter"
    assert picker.isVisible() and picker.toolTip() == DFLASH_TIP
    assert "z-lab's or the speculators layout" in DFLASH_TIP
    assert EXTRA_DEFAULTS["dflash"] == "embedded" and panel.specs()["dflash"] == "embedded"
    picker.set_spec("z-lab/Qwen3-8B-DFlash-b16")
    assert panel.specs()["dflash"] == "z-lab/Qwen3-8B-DFlash-b16"
    older = {k: v for k, v in panel.values().items() if not k.endswith("dflash")}
    fresh = ModelsPanel()
    qtbot.addWidget(fresh)
    fresh.apply(older)  # settings saved before the picker existed
    assert fresh.specs()["dflash"] == "embedded"


def test_a_typed_drafter_reaches_the_run_request_of_both_methods(make_window, qtbot):  # noqa: F811
    window = make_window()
    edit = window.models.extras["dflash"].combo.lineEdit()
    edit.clear()
    qtbot.keyClicks(edit, "/drafters/mine")
    for method in ("dflash", "ddtree"):
        assert window.inputs.request(method).specs["dflash"] == "/drafters/mine"


def _steps(target, method: str, config: DecodeConfig) -> list[Step]:
    steps: list[Step] = []
    draft = tiny_dflash(target, seed=1, block=6)

    def keep(event) -> None:
        if isinstance(event, Step):
            steps.append(event)

    run(target, method, prompt(7, offset=4), config, draft, on_event=keep)
    return steps


def _shown(step: Step) -> int:
    """The step's accepted drafts emitted (the last step stops at max_new_tokens)."""
    return sum(token.kind is TokenKind.ACCEPTED_DRAFT for token in step.tokens)


def _runs(view: TokenView) -> list[tuple[int, int]]:
    """(step, length) of each run of consecutive accepted drafts in the view."""
    runs: list[tuple[int, int]] = []
    previous = None
    for token in view.tokens:
        if token.kind is TokenKind.ACCEPTED_DRAFT:
            if previous is not None and previous.kind is TokenKind.ACCEPTED_DRAFT:
                runs[-1] = (runs[-1][0], runs[-1][1] + 1)
            else:
                runs.append((token.step, 1))
        previous = token
    return runs


def test_a_dflash_blocks_accepted_tokens_read_as_one_draft(qtbot, tiny_target):
    # sampled at T = 2, where the tiny random drafter's blocks are taken whole or in part
    steps = _steps(tiny_target, "dflash", DecodeConfig(max_new_tokens=24, temperature=2.0, seed=3))
    view = TokenView()
    qtbot.addWidget(view)
    view.set_show_rejected(True)
    for step in steps:
        view.add_step(step)
    accepted = [(s.index, _shown(s)) for s in steps if _shown(s)]
    assert accepted and _runs(view) == accepted  # one green run per block, ended by the target
    assert any(n > 1 for _, n in accepted)  # a block gave several tokens in one step
    start = 0  # the document position where each token starts
    order = 0  # the token's place among its step's accepted drafts
    for index, token in enumerate(view.tokens):
        if token.kind is TokenKind.ACCEPTED_DRAFT:
            step = next(s for s in steps if s.index == token.step)
            previous = view.tokens[index - 1] if index else None
            same_run = previous is not None and previous.kind is TokenKind.ACCEPTED_DRAFT
            order = order + 1 if same_run else 0
            line = draft_line(step, order)
            assert "from one draft of 5 tokens verified in one forward" in line
            if token.text:  # an empty token (a special one) has no character to hover
                assert line in view.format_of(index).toolTip()
                assert line in view.tooltip_at(start)  # the hover the view shows there
        start += len(token.text)


def test_a_ddtree_steps_accepted_path_is_shown_as_a_trees(qtbot, tiny_target):
    steps = _steps(tiny_target, "ddtree", DecodeConfig(max_new_tokens=24, tree_tokens=8))
    view = TokenView()
    qtbot.addWidget(view)
    for step in steps:
        view.add_step(step)
    trees = [s for s in steps if s.tree is not None]
    assert trees and all(s.drafted == len(s.tree.tokens) for s in trees)
    assert _runs(view) == [(s.index, _shown(s)) for s in steps if _shown(s)]
    first = next(i for i, t in enumerate(view.tokens) if t.kind is TokenKind.ACCEPTED_DRAFT)
    step = next(s for s in steps if s.index == view.tokens[first].step)
    assert f"from a tree of {step.drafted} tokens" in view.format_of(first).toolTip()


class RealRegistries(FakeEngine):
    """The fake engine with the engine's real methods (families, parameters)."""

    def registries(self):
        return SpecdecEngine().registries()


def test_tune_offers_the_block_and_ddtree_its_tree_size_in_the_sweep_tab(make_window):  # noqa: F811
    window = make_window(RealRegistries())
    axis = window.sweep.view.tune_axis
    offered = {}
    for method in ("dflash", "ddtree"):
        window.decoding.select(window.decoding.method, method)
        offered[method] = [axis.itemData(i) for i in range(axis.count())]
    assert offered["dflash"] == ["block"]  # no k: the block sizes the chain
    assert offered["ddtree"] == ["block", ""]  # and the tree size
    assert window.sweep.view.tuned_param() == "block"
