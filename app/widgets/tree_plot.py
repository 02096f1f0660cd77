"""The last step's draft tree (EAGLE-2): nodes by depth, accepted path highlighted.

Labels use a pool of text items created once and reused, so redraws only move items. A label
is shown only where it fits at the plot's current size: at each depth the accepted node's
label first, then the others by draft score, each only if it keeps a text line's height from
the labels already shown there, and each cut (…) to the room before the next depth. A label
hugs its text (no margin) and starts a few pixels right of its node's dot and ends before the
next depth's dots, so no label covers another or any node. Every node shows its token on
hover, labelled or not.
"""

from __future__ import annotations

from collections.abc import Callable

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QFontMetrics

from app.plot_data import node_depths
from app.widgets.timed_plot import TimedPlot
from specdec_core.decoding.events import DraftTree

ACCEPTED = "#009E73"
OTHER = "#9a9a9a"
MAX_LABELS = 48
NODE_SIZE = 9  # a node's dot, in pixels
LABEL_GAP = 3  # pixels between a dot's edge and a label
LABEL_FILL = (255, 255, 255, 210)  # edges pass behind a label, not through its text


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
        self.nodes = pg.ScatterPlotItem(
            size=NODE_SIZE, pen=None, hoverable=True, tip=lambda x, y, data: data
        )
        self.addItem(self.nodes)
        self.labels = [
            pg.TextItem(anchor=(0, 0.5), color="#222", fill=LABEL_FILL) for _ in range(MAX_LABELS)
        ]
        for label in self.labels:
            label.textItem.document().setDocumentMargin(0)  # the fill hugs the text
            label.setVisible(False)
            self.addItem(label)
        self.note = pg.TextItem(
            "no tree yet: tree drafting is EAGLE-2", color="#777", anchor=(0.5, 0.5)
        )
        self.addItem(self.note)
        self.tree: DraftTree | None = None
        self.texts: list[str] = []  # each node's label text, uncut
        self.positions: tuple[list[float], list[float]] = ([], [])
        self.show_tree(None)
        self.getViewBox().sigResized.connect(self.fit_labels)

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
        self.texts = [self.labeler(token).replace("\n", "↵") for token in tree.tokens]
        self.positions = (x, y)
        self.nodes.setData(
            [0.0, *x], [0.0, *y], brush=["#333", *brushes], data=["(last accepted)", *self.texts]
        )
        self.setRange(xRange=(-0.2, max(x) + 0.8), yRange=(min(y) - 0.5, max(y) + 0.5), padding=0)
        self.fit_labels()

    def fit_labels(self) -> None:
        """Show the labels that fit at the current size (see the module docstring)."""
        tree = self.tree
        if tree is None or not tree.tokens:
            return
        box = self.getViewBox()
        (x0, x1), (y0, y1) = box.viewRange()
        width, height = box.width(), box.height()
        if width <= 0 or height <= 0:
            return
        per_depth = width / (x1 - x0) if x1 > x0 else width
        per_row = height / (y1 - y0) if y1 > y0 else height
        metrics = QFontMetrics(self.labels[0].textItem.font())
        line, x, y = metrics.height(), *self.positions
        clear = NODE_SIZE / 2 + LABEL_GAP  # pixels a label keeps from a dot, either side
        offset = clear / per_depth  # in depth units
        order = sorted(
            range(min(len(tree.tokens), MAX_LABELS)),
            key=lambda i: (i not in tree.accepted, -tree.scores[i], i),
        )
        shown: dict[float, list[float]] = {}  # depth -> rows of the labels shown there
        for label in self.labels:
            label.setVisible(False)
        for i in order:
            rows = shown.setdefault(x[i], [])
            if any(abs(y[i] - r) * per_row < line for r in rows):
                continue
            room = int((min(x[i] + 1, x1) - x[i]) * per_depth - 2 * clear)
            text = metrics.elidedText(self.texts[i], Qt.TextElideMode.ElideRight, max(room, 0))
            if not text or text == "…":
                continue  # no room for a character
            rows.append(y[i])
            label = self.labels[i]
            label.setText(text)
            label.setPos(x[i] + offset, y[i])
            label.setVisible(True)


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
