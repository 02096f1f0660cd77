"""Runs feed their own timed target forwards into the forward costs that size their trees: the
next run of the same owner sizes with the followed table, reports it, and still decodes what
`ar` decodes. Stop during a first run's timing of forwards ends that run before its prefill
and keeps nothing of the timing."""

from __future__ import annotations

import re

import pytest

from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.events import Finished, Step
from specdec_core.decoding.forward_costs import ForwardCosts, TimedForwards, TimingStopped
from specdec_core.drafters.tree_sizing import AcceptanceEstimates
from specdec_core.loop.decode import generate
from specdec_core.run.runner import run
from tests.eagle_tiny import tiny_head
from tests.test_medusa import random_heads
from tests.tiny import prompt

TIMED_AT_LOAD = r"\(timed at load(, a line through the timings)?\)$"  # the table's last words

CONFIG = DecodeConfig(max_new_tokens=30)


class StopAfter:
    """A Stop pressed once `is_set` has been asked `checks` times (the timing asks it before
    each timed forward)."""

    def __init__(self, checks: int) -> None:
        self.left = checks

    def is_set(self) -> bool:
        self.left -= 1
        return self.left < 0


def test_every_step_of_a_run_feeds_the_table_the_next_run_sizes_with(tiny_target):
    head = tiny_head(tiny_target)
    costs, acceptance = ForwardCosts(), AcceptanceEstimates()
    ids = prompt()
    first = run(tiny_target, "eagle2", ids, CONFIG, head, costs=costs, acceptance=acceptance)
    assert costs.target_steps(tiny_target.model) == first.steps > 0
    assert first.config["forward_costs"]["target_steps"] == 0  # sized before its steps ran
    assert re.search(TIMED_AT_LOAD, first.config["tree_sizing"])
    second = run(tiny_target, "eagle2", ids, CONFIG, head, costs=costs, acceptance=acceptance)
    table = second.config["forward_costs"]
    assert table["target_steps"] == first.steps
    assert f"followed over {first.steps} steps" in second.config["tree_sizing"]
    in_use = costs.target(tiny_target.model)
    assert list(table["target_ms"]) == sorted(in_use)
    ar = run(tiny_target, "ar", ids, CONFIG)
    assert first.token_ids == second.token_ids == ar.token_ids


def test_a_given_tree_shape_neither_measures_nor_follows(tiny_target):
    costs = ForwardCosts()
    config = DecodeConfig(max_new_tokens=12, tree_depth=2, tree_topk=2, tree_tokens=5)
    summary = run(tiny_target, "eagle2", prompt(), config, tiny_head(tiny_target), costs=costs)
    assert summary.config["tree_sizing"] == "given" and "forward_costs" not in summary.config
    assert costs.target_steps(tiny_target.model) == 0


def test_medusa_feeds_its_steps_into_the_costs_it_sizes_with(tiny_target):
    from specdec_core.drafters.medusa import MedusaDrafter

    costs = ForwardCosts()
    drafter = MedusaDrafter(random_heads(heads=3), tiny_target.model, costs, AcceptanceEstimates())
    assert isinstance(drafter, TimedForwards)
    events = list(generate(tiny_target, drafter, prompt(6), CONFIG))
    steps = [e for e in events if isinstance(e, Step)]
    assert costs.target_steps(tiny_target.model) == len(steps) > 0
    summary = events[-1].summary
    assert isinstance(events[-1], Finished) and "forward_costs" in summary.config
    assert "target ms by tokens 1: " in summary.config["tree_sizing"]


def test_the_hover_shows_the_table_in_use_on_a_line_of_its_own(tiny_target):
    from app.widgets.output_panel import summary_details

    summary = run(tiny_target, "eagle2", prompt(), CONFIG, tiny_head(tiny_target))
    lines = summary_details(summary).splitlines()
    assert lines[0].startswith("tree sizing: auto: E[tau]")
    sizes = summary.config["forward_costs"]["target_ms"]
    assert lines[-1].startswith("target ms by tokens 1: ")
    assert re.search(TIMED_AT_LOAD, lines[-1])
    assert lines[-1].count(":") == len(sizes)


def test_stop_during_the_first_timing_of_forwards_ends_the_run_before_its_prefill(tiny_target):
    head = tiny_head(tiny_target)
    costs, acceptance = ForwardCosts(), AcceptanceEstimates()
    ids = prompt()
    stopped = run(
        tiny_target, "eagle2", ids, CONFIG, head, stop=StopAfter(3), costs=costs,
        acceptance=acceptance,
    )  # fmt: skip
    assert stopped.stop_reason == "stopped"
    assert (stopped.steps, stopped.new_tokens, stopped.prefill_seconds) == (0, 0, 0.0)
    assert "tree_sizing" not in stopped.config
    with pytest.raises(TimingStopped):  # nothing of the stopped timing was kept
        costs.watching(StopAfter(0)).target(tiny_target.model)
    again = run(tiny_target, "eagle2", ids, CONFIG, head, costs=costs, acceptance=acceptance)
    assert re.search(TIMED_AT_LOAD, again.config["tree_sizing"])
    assert again.token_ids == run(tiny_target, "ar", ids, CONFIG).token_ids
