"""The Sweep tab's heat map is coloured on a fixed scale, explained by a colour bar, and its
lines are plain words."""

from __future__ import annotations

import pytest
from PySide6.QtGui import QColor

from app.widgets.sweep_view import (
    FASTEST,
    NEUTRAL,
    SLOWEST,
    SweepView,
    progress_words,
    result_words,
    speedup_color,
    tune_words,
)
from specdec_core.decoding.config import DecodeConfig
from specdec_core.measurement.sweep_records import Aggregate, MeasuredPoint, TuneResult, TuneRow


@pytest.fixture
def view(qtbot):
    widget = SweepView()
    qtbot.addWidget(widget)
    return widget


def at(point: dict, speedup: float) -> MeasuredPoint:
    """A point measured at `speedup` (τ 1: the view colours by speedup alone)."""
    config = DecodeConfig(temperature=point["temperature"])
    return MeasuredPoint(point, config, Aggregate(speedup, 1.0, speedup_vs_ar=speedup))


def measured(view: SweepView, speedups: dict[int, float], temperature: float = 0.0) -> None:
    """One row of k = 1, 2, 3, …, each k measured at its speedup."""
    view.begin({"temperature": [temperature], "k": [1, 2, 3, 4]})
    for k, speedup in speedups.items():
        point = {"temperature": temperature, "k": k}
        view.add_record(at(point, speedup))


def hue_side(color: QColor) -> str:
    if color.red() > color.blue() + 40:
        return "red"
    if color.blue() > color.red() + 40:
        return "blue"
    return "grey"


def test_slower_is_red_no_gain_is_neutral_and_faster_is_blue(view):
    measured(view, {1: 0.8, 2: 1.0, 3: 2.0})
    slower, even, faster = (view.cell_color(0, col) for col in range(3))
    assert hue_side(slower) == "red"
    assert even == NEUTRAL and hue_side(even) == "grey"
    assert hue_side(faster) == "blue"
    assert view.cell_color(0, 3) is None  # k = 4 not measured yet: hatched, not a colour
    assert [view.labels[(0, col)].textItem.toPlainText() for col in range(3)] == [
        "0.80x",
        "1.00x",
        "2.00x",
    ]


def test_the_scale_is_absolute_not_relative_to_the_best_cell(view):
    measured(view, {1: 1.36, 2: 2.0})
    modest = view.cell_color(0, 0)
    assert modest != speedup_color(FASTEST)  # the best of a modest sweep is not the darkest
    assert modest.lightnessF() > speedup_color(2.0).lightnessF() > speedup_color(3.0).lightnessF()
    two = view.cell_color(0, 1)
    measured(view, {1: 2.0, 2: 3.5})  # a faster cell beside it changes nothing
    assert view.cell_color(0, 0) == two
    assert view.cell_color(0, 1) == speedup_color(FASTEST)  # 3× and above: the full colour
    assert speedup_color(0.3) == speedup_color(SLOWEST)


def test_slower_grows_darker_and_just_slower_is_still_red(view):
    assert hue_side(speedup_color(0.98)) == "red"  # distinct from no gain
    assert speedup_color(0.6).lightnessF() < speedup_color(0.9).lightnessF()
    assert speedup_color(1.003) == NEUTRAL  # reads 1.00x


def test_the_colour_bar_shows_the_fixed_scale(view):
    assert tuple(view.colorbar.levels()) == (SLOWEST, FASTEST)
    bar = view.colorbar.colorMap()
    middle = (1.0 - SLOWEST) / (FASTEST - SLOWEST)  # where 1× sits on the bar
    assert bar.map(middle, mode="qcolor").name() == NEUTRAL.name()
    assert "speedup vs autoregressive" in view.legend.text()
    assert "red: slower" in view.legend.text() and "blue: faster" in view.legend.text()


def test_the_result_line_is_plain_words(view):
    records = [at({"temperature": 0.0, "k": 3}, 1.9), at({"temperature": 0.7, "k": 1}, 1.2)]
    view.show_result(records, "Classic draft")
    assert view.status.text() == (
        "2 points of Classic draft measured; fastest: 1.90× vs autoregressive at temperature "
        "0, 3 drafted tokens per step; click a cell to use it"
    )
    tree = [at({"temperature": 0.0, "tree_tokens": 16}, 1.92)]
    assert result_words(tree, "EAGLE-2 + prompt lookup") == (
        "1 point of EAGLE-2 + prompt lookup measured; fastest: 1.92× vs autoregressive at "
        "temperature 0, a tree of 16 tokens; click a cell to use it"
    )
    slow = [at({"temperature": 1.0, "policy_params.tau": 0.3}, 0.8)]
    assert result_words(slow, "N-gram lookup") == (
        "1 point of N-gram lookup measured; every one is slower than autoregressive decoding, "
        "the least slow 0.80× vs autoregressive at temperature 1, the policy's tau at 0.3"
    )
    assert result_words([], "EAGLE") == "no point of the EAGLE sweep was measured"


def test_clicking_a_cell_says_what_it_applied_in_words(view):
    measured(view, {2: 1.5})
    view.select_cell(0, 1)
    assert view.status.text() == (
        "applied temperature 0, 2 drafted tokens per step (1.50× vs autoregressive)"
    )
    view.select_cell(0, 3)
    assert (
        view.status.text() == "applied temperature 0, 4 drafted tokens per step (not measured yet)"
    )
    start = progress_words("sweeping EAGLE-2 + prompt lookup", 0, 12, {"k": 1}, 2.0, None)
    assert start == (
        "sweeping EAGLE-2 + prompt lookup: 0/12 points; measuring 1 drafted token per step "
        "(0m02s in); the time left is known after the first point"
    )
    later = progress_words("sweeping EAGLE-2", 3, 12, {"temperature": 0.7, "k": 4}, 5.0, 95.0)
    assert later == (
        "sweeping EAGLE-2: 3/12 points; measuring temperature 0.7, 4 drafted tokens per step "
        "(0m05s in); about 1m35s left"
    )


def test_the_tune_line_says_what_was_chosen_in_words(view):
    rows = (TuneRow(2, 150.0, 1.5, 2.2, 100.0), TuneRow(3, 151.0, 1.51, 2.4, 100.0))
    tied = TuneResult("classic", rows, 2, "k=2: …")  # the smaller of two near-equal k
    assert tune_words(tied, "Classic draft") == (
        "Tune chose 2 drafted tokens per step for Classic draft: 1.50× vs autoregressive "
        "(τ 2.20), about as fast as 3 drafted tokens per step (1.51×) and smaller"
    )
    slow = TuneResult(
        "eagle2", (TuneRow(16, 80.0, 0.8, 1.4, 100.0),), 16, "", setting="tree_tokens"
    )
    assert tune_words(slow, "EAGLE-2 (tree)") == (
        "Tune chose a tree of 16 tokens for EAGLE-2 (tree): 0.80× vs autoregressive (τ 1.40); "
        "none was faster than autoregressive decoding on this device"
    )
    stopped = TuneResult("eagle2", (), None, "", stopped=True, setting="tree_tokens")
    view.show_tuned(stopped, "EAGLE-2 (tree)")
    assert view.status.text() == (
        "Tune of EAGLE-2 (tree) stopped after 0 measured values; it keeps a tree sized "
        "automatically"
    )
