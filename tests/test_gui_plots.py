"""Live plots: every plot receives the step data; redraws are throttled."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPointF, QRectF

from app.plot_data import Series, node_depths
from app.widgets.plots_panel import REDRAW_MS, PlotsPanel
from app.widgets.tree_plot import TreePlot
from specdec_core.decoding.events import DraftTree, Step
from tests.gui_fake import TREE, fake_step


@pytest.fixture
def panel(qtbot):
    widget = PlotsPanel()
    qtbot.addWidget(widget)
    return widget


def test_series_accumulates_acceptance_length_mean_speed_and_positions():
    series = Series("classic", "#000")
    steps = [fake_step(i, "classic") for i in range(5)]  # accepts 0, 1, 2, 3, 4 of k = 4
    for step in steps:
        series.add_step(step)
    assert series.accept == [1, 2, 3, 4, 5]
    assert series.mean[-1] == pytest.approx(15 / 5)  # τ = new tokens / target forwards
    assert series.time[-1] == pytest.approx(5 * 0.012)
    assert series.tps[-1] == pytest.approx(15 / (5 * 0.012))
    assert series.drafted_at == [5, 5, 5, 5]
    assert series.accepted_at == [4, 3, 2, 1]
    assert series.position_rates() == [0.8, 0.6, 0.4, 0.2]


def test_plots_receive_the_step_data(panel):
    panel.begin_series("Classic draft", "#E69F00")
    for i in range(5):
        panel.add_step("Classic draft", fake_step(i, "classic"))
    panel.redraw()

    points, mean = panel.acceptance.items["Classic draft"]
    assert list(points.getData()[1]) == [1, 2, 3, 4, 5]
    assert list(mean.getData()[1]) == pytest.approx([1, 1.5, 2, 2.5, 3])
    x, y = panel.speed.items["Classic draft"].getData()
    assert len(x) == 5 and y[-1] == pytest.approx(15 / 0.06)
    bars = panel.positions.items["Classic draft"]
    assert list(bars.opts["height"]) == pytest.approx([0.8, 0.6, 0.4, 0.2])
    assert panel.tree.tree is None and panel.tree.note.isVisible()


def test_the_token_plots_never_show_a_negative_y_axis(panel, qtbot):
    """A first step with no token and no time (0 tokens, 0 tokens/s) would pad the axes
    below zero."""
    panel.show()
    panel.begin_series("Classic draft", "#E69F00")
    panel.add_step("Classic draft", Step(0, (), 0, 0))
    for i in range(1, 5):
        panel.add_step("Classic draft", fake_step(i, "classic"))
    panel.redraw()
    for plot in (panel.acceptance, panel.speed):  # the ranges follow the data once painted
        qtbot.waitUntil(lambda p=plot: p.viewRange()[1][1] > 2, timeout=2000)
        assert plot.viewRange()[1][0] >= 0, type(plot).__name__


def test_one_curve_per_run_when_comparing(panel):
    for name in ("Autoregressive", "Classic draft"):
        panel.begin_series(name, "#123456")
        panel.add_step(name, fake_step(0, "ar" if name == "Autoregressive" else "classic"))
    panel.redraw()
    assert set(panel.acceptance.items) == {"Autoregressive", "Classic draft"}
    assert set(panel.speed.items) == {"Autoregressive", "Classic draft"}
    assert set(panel.positions.items) == {"Classic draft"}  # autoregressive drafts nothing
    assert "Autoregressive" in panel.key.text() and "Classic&nbsp;draft" in panel.key.text()
    panel.reset()
    assert not panel.acceptance.items and not panel.series


def test_the_tree_plot_shows_the_last_tree_with_the_accepted_path(panel):
    panel.set_labeler(lambda token_id: f"t{token_id}")
    panel.begin_series("EAGLE-2", "#009E73")
    panel.add_step("EAGLE-2", fake_step(0, "eagle2"))
    panel.redraw()
    assert panel.tree.tree == TREE
    assert len(panel.tree.nodes.data) == len(TREE.tokens) + 1  # + the root
    path_x, _ = panel.tree.path.getData()
    assert len(path_x) == 2 * len(TREE.accepted)  # one segment per accepted node
    edges_x, _ = panel.tree.edges.getData()
    assert len(edges_x) == 2 * (len(TREE.tokens) - len(TREE.accepted))
    visible = [label.toPlainText() for label in panel.tree.labels if label.isVisible()]
    assert visible == [f"t{token}" for token in TREE.tokens]
    assert node_depths(TREE.parents) == [1, 1, 2, 2, 3]


def wide_tree() -> DraftTree:
    """Six first guesses, each with four children: 30 nodes, 24 leaves; the path 0 → 6."""
    parents = [-1] * 6 + [p for p in range(6) for _ in range(4)]
    scores = [-0.1 * i for i in range(len(parents))]
    return DraftTree(tuple(range(len(parents))), tuple(parents), tuple(scores), (0, 6))


def visible_labels(plot: TreePlot) -> list:
    return [label for label in plot.labels if label.isVisible()]


def test_tree_labels_never_overlap_and_show_the_accepted_path_first(qtbot):
    plot = TreePlot()
    qtbot.addWidget(plot)
    plot.labeler = lambda token_id: f"token-with-a-long-text-{token_id}"
    plot.resize(320, 160)
    plot.show()
    qtbot.waitExposed(plot)
    plot.show_tree(wide_tree())
    small = visible_labels(plot)
    rects = [label.sceneBoundingRect() for label in small]
    for a in range(len(rects)):
        for b in range(a + 1, len(rects)):
            assert not rects[a].intersects(rects[b]), (
                small[a].toPlainText(),
                small[b].toPlainText(),
            )
    assert {plot.labels[0], plot.labels[6]} <= set(small)  # the accepted path keeps its labels
    assert len(small) < 30 and all(label.toPlainText().endswith("…") for label in small)
    plot.resize(1000, 900)
    qtbot.waitUntil(lambda: len(visible_labels(plot)) > len(small), timeout=2000)
    # every node names its token on hover, labelled or not
    assert list(plot.nodes.data["data"][1:]) == [f"token-with-a-long-text-{i}" for i in range(30)]


def deep_tree() -> DraftTree:
    """A 20-node tree six deep, three first guesses, the path 0 → 3 → 8 → 14 → 16."""
    parents = (-1, -1, -1, 0, 0, 0, 1, 1, 3, 3, 4, 6, 8, 8, 9, 11, 14, 14, 15, 16)
    scores = tuple(-0.1 * i for i in range(len(parents)))
    return DraftTree(tuple(range(len(parents))), parents, scores, (0, 3, 8, 14, 16))


@pytest.mark.parametrize("tree", [wide_tree(), deep_tree()], ids=["wide", "deep"])
def test_no_tree_label_covers_a_node_at_the_size_of_a_1280_pixel_window(qtbot, tree):
    words = [" the", " sky", " is", " blue", " because", " of", " Rayleigh", " scattering"]
    plot = TreePlot()
    qtbot.addWidget(plot)
    plot.labeler = lambda token_id: words[token_id % len(words)]
    plot.resize(316, 179)  # the tree plot of a 1280×800 window
    plot.show()
    qtbot.waitExposed(plot)
    plot.show_tree(tree)
    box = plot.getViewBox()
    xs, ys = plot.positions
    half = 9 / 2
    dots = [box.mapViewToScene(QPointF(0.0, 0.0))]
    dots += [box.mapViewToScene(QPointF(x, y)) for x, y in zip(xs, ys, strict=True)]
    shown = visible_labels(plot)
    assert shown, "no label at all"
    for label in shown:
        rect = label.sceneBoundingRect()
        for centre in dots:
            dot = QRectF(centre.x() - half, centre.y() - half, 2 * half, 2 * half)
            assert not rect.intersects(dot), (label.toPlainText(), rect, dot)
    rects = [label.sceneBoundingRect() for label in shown]
    for a in range(len(rects)):
        for b in range(a + 1, len(rects)):
            assert not rects[a].intersects(rects[b])


def test_every_plot_stays_inside_its_view_after_a_run_whose_first_steps_widened_an_axis(qtbot):
    """A plot's axis widens for a moment (one point: ticks of many digits) and narrows again:
    the plot narrows back with it, never left wider than the pane that shows it (cut off)."""
    panel = PlotsPanel()
    qtbot.addWidget(panel)
    panel.resize(316, 760)  # the plots' pane of a 1280×800 window
    panel.show()
    qtbot.waitExposed(panel)
    panel.begin_series("Autoregressive", "#6b6b6b")
    for i in range(8):  # a steady rate: the speed axis spans one value, ticks of many digits
        panel.add_step("Autoregressive", fake_step(i, "ar"))
    panel.redraw()
    panel.grab()  # painted: an axis sizes itself to its tick labels as it paints
    qtbot.wait(20)  # the plot's layout follows
    panel.begin_series("Classic draft", "#E69F00")
    for i in range(14):
        panel.add_step("Classic draft", fake_step(i, "classic"))
    panel.redraw()
    panel.grab()
    qtbot.wait(20)
    panel.redraw()  # the run's last redraw, after the axis has narrowed again
    for plot in panel.plots:
        assert plot.plotItem.geometry().width() <= plot.viewport().width(), type(plot).__name__


def test_a_steady_speed_keeps_a_readable_speed_axis(panel, qtbot):
    """Autoregressive decoding at one speed: the axis spans a fifth of it, not a sliver with
    ticks of a dozen digits."""
    panel.begin_series("Autoregressive", "#6b6b6b")
    for i in range(8):
        panel.add_step("Autoregressive", fake_step(i, "ar"))
    panel.show()
    panel.redraw()
    qtbot.wait(20)  # the view ranges itself to its data
    low, high = panel.speed.getViewBox().viewRange()[1]
    speed = panel.series["Autoregressive"].tps[-1]
    assert low <= speed <= high and high - low >= 0.2 * speed


def test_redraws_are_throttled(panel, qtbot):
    panel.begin_series("Autoregressive", "#6b6b6b")
    for i in range(200):
        panel.add_step("Autoregressive", fake_step(i, "ar"))
    qtbot.waitUntil(lambda: panel.redraws >= 1, timeout=2000)
    qtbot.wait(150)
    assert panel.redraws <= 3
    assert len(panel.acceptance.items["Autoregressive"][0].getData()[0]) == 200


def test_a_slow_redraw_spaces_the_next_ones_to_keep_painting_under_a_twentieth(panel, qtbot):
    import time

    panel.begin_series("Autoregressive", "#6b6b6b")
    panel.add_step("Autoregressive", fake_step(0, "ar"))
    panel.redraw()
    assert panel.request_redraw.timeout() == REDRAW_MS  # a fast redraw: once a second
    sync = panel.acceptance.sync
    panel.acceptance.sync = lambda series: (time.sleep(0.1), sync(series))
    panel.redraw()
    assert panel.redraw_seconds >= 0.1
    assert panel.request_redraw.timeout() >= 20 * 100  # 0.1 s of every 2 s at most
