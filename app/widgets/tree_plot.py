"""The last step's draft tree (EAGLE-2): nodes by depth, accepted path highlighted.

Labels use a pool of text items created once and reused, so redraws only move items.
"""

from __future__ import annotations

from collections.abc import Callable

import pyqtgraph as pg

from app.plot_data import node_depths
from app.widgets.timed_plot import TimedPlot
from specdec_core.events import DraftTree

ACCEPTED = "#009E73"
OTHER = "#9a9a9a"
MAX_LABELS = 48


class TreePlot(TimedPlot):
    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setTitle("Last draft tree (accepted: green)", size="10pt")
        self.hideAxis("left")
        self.setLabel("bottom", "depth")
        self.getAxis("bottom").enableAutoSIPrefix(False)
        self.getAxis("bottom").setTickSpacing(1, 1)
        self.setMouseEnabled(x=False, y=False)
        self.labeler: Callable[[int], str] = str
        self.edges = self.plot(pen=pg.mkPen(OTHER, width=1), connect="pairs")
        self.path = self.plot(pen=pg.mkPen(ACCEPTED, width=3), connect="pairs")
        self.nodes = pg.ScatterPlotItem(size=9, pen=None)
        self.addItem(self.nodes)
        self.labels = [pg.TextItem(anchor=(0, 0.5), color="#222") for _ in range(MAX_LABELS)]
        for label in self.labels:
            label.setVisible(False)
            self.addItem(label)
        self.note = pg.TextItem(
            "no tree yet: tree drafting is EAGLE-2", color="#777", anchor=(0.5, 0.5)
        )
        self.addItem(self.note)
        self.tree: DraftTree | None = None
        self.show_tree(None)

    def reset(self) -> None:
        self.show_tree(None)

    def show_tree(self, tree: DraftTree | None) -> None:
        self.tree = tree
        if tree is None or not tree.tokens:
            for item in (self.edges, self.path):
                item.setData([], [])
            self.nodes.setData([], [])
            for label in self.labels:
                label.setVisible(False)
            self.note.setVisible(True)
            self.note.setPos(0.5, 0.5)
            self.getAxis("bottom").setStyle(showValues=False)
            self.setRange(xRange=(0, 1), yRange=(0, 1), padding=0)
            return
        self.note.setVisible(False)
        self.getAxis("bottom").setStyle(showValues=True)
        x, y = _layout(tree)
        accepted = set(tree.accepted)
        ex, ey, px, py = [], [], [], []
        for node, parent in enumerate(tree.parents):
            x0, y0 = (0.0, 0.0) if parent < 0 else (x[parent], y[parent])
            (px if node in accepted else ex).extend([x0, x[node]])
            (py if node in accepted else ey).extend([y0, y[node]])
        self.edges.setData(ex, ey)
        self.path.setData(px, py)
        brushes = [ACCEPTED if i in accepted else OTHER for i in range(len(tree.tokens))]
        self.nodes.setData([0.0, *x], [0.0, *y], brush=["#333", *brushes])
        show = len(tree.tokens) <= MAX_LABELS
        for i, label in enumerate(self.labels):
            visible = show and i < len(tree.tokens)
            label.setVisible(visible)
            if visible:
                label.setText(self.labeler(tree.tokens[i]).replace("\n", "↵"))
                label.setPos(x[i] + 0.08, y[i])
        self.setRange(xRange=(-0.2, max(x) + 0.8), yRange=(min(y) - 0.5, max(y) + 0.5), padding=0)


def _layout(tree: DraftTree) -> tuple[list[float], list[float]]:
    """x = depth; leaves take consecutive rows (depth first), a parent sits at their mean."""
    depths = node_depths(tree.parents)
    children: dict[int, list[int]] = {}
    for node, parent in enumerate(tree.parents):
        children.setdefault(parent, []).append(node)
    y = [0.0] * len(tree.parents)
    row = 0

    def place(node: int) -> float:
        nonlocal row
        kids = children.get(node, [])
        if not kids:
            y[node] = -float(row)
            row += 1
        else:
            y[node] = sum(place(kid) for kid in kids) / len(kids)
        return y[node]

    for root_child in children.get(-1, []):
        place(root_child)
    middle = (row - 1) / 2
    return [float(d) for d in depths], [v + middle for v in y]
