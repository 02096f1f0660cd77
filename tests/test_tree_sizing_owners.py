"""Who owns EAGLE-2's tree sizing in the window's engine: one engine's runs share the costs it
measured and the acceptance it learned; another engine starts from the prior."""

from __future__ import annotations

import threading

from app.engine import SpecdecEngine
from app.engine_api import RunRequest
from specdec_core.decoding.config import DecodeConfig
from specdec_core.drafters.tree_sizing import ALPHA1
from specdec_core.run import runner
from tests.eagle_tiny import tiny_head

CONFIG = DecodeConfig(max_new_tokens=60)


def _sizing(engine: SpecdecEngine) -> str:
    """The tree size a run of `eagle2` chose, and why (its `tree_sizing` reason)."""
    request = RunRequest("eagle2", "w3 w4 w5 w6", CONFIG, raw=True)
    events = list(engine.events(request, threading.Event(), lambda message, fraction: None))
    return events[-1].summary.config["tree_sizing"]


def test_an_engine_s_runs_share_its_tree_sizing_and_another_engine_starts_over(
    tiny_target, monkeypatch
):
    head = tiny_head(tiny_target)
    monkeypatch.setitem(runner.EXTRA_LOADERS, "head", lambda spec, target, progress=None: head)
    prior = f"top-1 acceptance {ALPHA1:.2f}"
    engine = SpecdecEngine(tiny_target)
    assert prior in _sizing(engine)
    assert prior not in _sizing(engine)  # the second run sizes with what the first learned
    assert prior in _sizing(SpecdecEngine(tiny_target))
