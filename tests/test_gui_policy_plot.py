"""The decoding panel plots τ against distance as runs arrive, while a lossy policy is chosen."""

from __future__ import annotations

import pytest

from app.engine_api import Registries
from app.widgets.decoding_panel import DecodingPanel
from specdec_core.decoding.events import RunSummary
from specdec_core.measurement.run_distance import RunDistance
from tests.gui_fake import METHODS, POLICIES


def summary(policy: str, new_tokens: int, steps: int) -> RunSummary:
    return RunSummary(
        method="classic",
        policy=policy,
        lossy=policy != "lossless",
        prompt_tokens=4,
        new_tokens=new_tokens,
        token_ids=tuple(range(new_tokens)),
        text="",
        steps=steps,
        wall_seconds=0.1,
        prefill_seconds=0.0,
        stop_reason="max_tokens",
    )


@pytest.fixture
def panel(qtbot):
    widget = DecodingPanel()
    qtbot.addWidget(widget)
    widget.set_registries(Registries(METHODS, POLICIES))
    return widget


def test_the_plot_shows_only_while_a_lossy_policy_is_chosen(panel):
    assert not panel.form.isRowVisible(panel.policy_plot)
    panel.select(panel.policy, "threshold")
    assert panel.form.isRowVisible(panel.policy_plot)
    panel.select(panel.policy, "lossless")
    assert not panel.form.isRowVisible(panel.policy_plot)


def test_each_run_is_a_point_at_its_distance_and_tau(panel):
    plot = panel.policy_plot
    panel.add_run(summary("lossless", 12, 8))
    panel.add_run(summary("threshold", 20, 8), RunDistance().add(0.25, 0.1).add(0.05, 0.0))
    lossless_x, lossless_y = plot.lossless.getData()
    lossy_x, lossy_y = plot.lossy.getData()
    assert list(lossless_x) == [0.0] and list(lossless_y) == [pytest.approx(1.5)]
    assert list(lossy_x) == [pytest.approx(0.15)] and list(lossy_y) == [pytest.approx(2.5)]
    assert plot.caption.text().startswith("2 run(s)")


def test_a_lossy_run_without_a_distance_is_counted_not_drawn(panel):
    plot = panel.policy_plot
    panel.add_run(summary("threshold", 20, 8))
    panel.add_run(summary("threshold", 0, 0))  # nothing decoded: no τ, no point
    assert plot.points == [] and plot.unmeasured == 1
    assert "1 lossy run(s) without a measured distance" in plot.caption.text()
    plot.clear()
    assert plot.unmeasured == 0 and "without" not in plot.caption.text()
