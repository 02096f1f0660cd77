"""The Train tab's ETA is never a bare "?": before generation or training has an estimate
(its first batch still running) it says the budget's end when a time budget is set, or
"estimating…" with how long the step has run; once there is one, never past the budget."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from app.train_controller import TrainController
from app.training_plan import TrainingPlan
from app.widgets.train_view import TrainView


def _controller(qtbot, work: Path, seconds: float | None, step: str) -> TrainController:
    view = TrainView()
    qtbot.addWidget(view)
    controller = TrainController(view, lambda: "target")
    controller.plan = TrainingPlan(target="target", work=work, seconds=seconds)
    controller.step = step  # as while that child runs
    controller.began = controller.step_began = time.monotonic() - 12
    return controller


def _generation_status(work: Path, eta_s: float | None, batches: int = 0) -> None:
    (work / "data").mkdir(parents=True, exist_ok=True)
    status = {
        "state": "running",
        "answer_tokens": 40 * batches,
        "budget": 1000,
        "tokens_per_s": None,
        "eta_s": eta_s,
        "sources": {"magpie": {"batches": batches}},
    }
    (work / "data" / "status.json").write_text(json.dumps(status))


def _training_progress(plan: TrainingPlan, eta_s: float | None, left: float | None) -> None:
    plan.head.mkdir(parents=True, exist_ok=True)
    record = {
        "epoch": 0.0,
        "step": 0,
        "steps": 0,
        "validation": [],
        "stage": "training",
        "tokens": 0,
        "tokens_total": 5000,
        "eta_s": eta_s,
        "budget_left_s": left,
        "note": "epoch 1, batch 1/6 running 0m12s",
    }
    plan.progress_file.write_text(json.dumps(record))


@pytest.mark.parametrize("seconds", [None, 120.0])
def test_generation_before_its_first_batch_says_what_is_known(qtbot, tmp_path, seconds):
    controller = _controller(qtbot, tmp_path, seconds, "generation")
    _generation_status(tmp_path, eta_s=None)
    controller.poll()
    line = controller.view.generation_text.text()
    assert "ETA ?" not in line
    if seconds is None:
        assert re.search(r"ETA estimating… \(running, 0m1\ds in\)", line)
    else:  # generation's share of the budget (half of it) ends in 48 s
        assert re.search(r"ETA at most 0m[34]\ds \(running", line) and "budget 1m" in line


def test_generation_with_an_estimate_shows_it_never_past_its_share(qtbot, tmp_path):
    controller = _controller(qtbot, tmp_path, 120.0, "generation")
    _generation_status(tmp_path, eta_s=30.0, batches=2)
    controller.poll()
    assert "ETA 0m30s (running" in controller.view.generation_text.text()
    _generation_status(tmp_path, eta_s=600.0, batches=2)
    controller.poll()
    shown = controller.view.generation_text.text()
    assert re.search(r"ETA 0m[34]\ds \(running", shown)  # the share's end, not 10 minutes


@pytest.mark.parametrize("left", [None, 37.0])
def test_training_before_its_first_batch_says_what_is_known(qtbot, tmp_path, left):
    controller = _controller(qtbot, tmp_path, None, "training")
    assert controller.plan is not None
    _training_progress(controller.plan, eta_s=None, left=left)
    controller.poll()
    line = controller.view.training_text.text()
    assert "ETA ?" not in line
    if left is None:
        assert re.search(r"ETA estimating… \(0m1\ds in\)", line)
    else:
        assert "ETA at most 0m37s" in line and "budget 0m37s left" in line
