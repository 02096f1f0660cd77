"""The "Tokens per step" plot never shows a negative y axis: empty, an autoregressive run of
one token per step, steps that emitted nothing, a new run after a reset, a long run."""

from __future__ import annotations

import pytest

from app.widgets.plots_panel import PlotsPanel
from specdec_core.decoding.events import Step
from tests.gui_fake import fake_step


@pytest.fixture
def panel(qtbot):
    widget = PlotsPanel()
    qtbot.addWidget(widget)
    widget.resize(500, 900)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


def lowest_shown(qtbot, panel: PlotsPanel) -> float:
    """The bottom of the Tokens per step plot's y axis once painted."""
    qtbot.wait(50)
    return min(panel.acceptance.viewRange()[1][0], panel.acceptance.getAxis("left").range[0])


def run(panel: PlotsPanel, name: str, steps: list[Step]) -> None:
    panel.begin_series(name, "#0072B2")
    for step in steps:
        panel.add_step(name, step)
    panel.redraw()


def nothing(index: int) -> Step:
    return Step(index, (), 0, 0)


def test_the_tokens_per_step_axis_starts_at_zero_or_above(qtbot, panel):
    assert "Tokens per step" in panel.acceptance.plotItem.titleLabel.text
    assert lowest_shown(qtbot, panel) >= 0  # empty
    run(panel, "Autoregressive", [fake_step(i, "ar") for i in range(6)])  # 1, 1, 1, …
    assert lowest_shown(qtbot, panel) >= 0
    panel.reset()
    run(panel, "Classic draft", [nothing(i) for i in range(3)])  # 0, 0, 0
    assert lowest_shown(qtbot, panel) >= 0
    panel.reset()
    run(panel, "EAGLE-2", [nothing(0), *(fake_step(i, "classic") for i in range(1, 300))])
    qtbot.waitUntil(lambda: panel.acceptance.viewRange()[1][1] > 4, timeout=2000)
    assert lowest_shown(qtbot, panel) >= 0
