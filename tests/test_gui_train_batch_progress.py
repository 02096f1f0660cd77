"""The Train tab's generation line shows the batch the job is making as its tokens come (the
job's status.json carries it while the batch runs), with the rate and ETA the job derives from
them; a status.json from a job that writes no such record reads as before."""

from __future__ import annotations

import json
import time
from pathlib import Path

from app.train_controller import TrainController
from app.training_plan import TrainingPlan, read_generation
from app.widgets.train_view import TrainView


def _controller(qtbot, work: Path) -> TrainController:
    view = TrainView()
    qtbot.addWidget(view)
    controller = TrainController(view, lambda: "target")
    controller.plan = TrainingPlan(target="target", work=work, tokens=1000)
    controller.step = "generation"  # as while the job runs
    controller.began = controller.step_began = time.monotonic() - 40
    return controller


def _status(work: Path, batch: dict | None, tokens_per_s=None, eta_s=None) -> None:
    (work / "data").mkdir(parents=True, exist_ok=True)
    status = {
        "state": "running", "message": "", "answer_tokens": 0, "budget": 1000,
        "tokens_per_s": tokens_per_s, "eta_s": eta_s, "sources": {"magpie": {"batches": 0}},
    }  # fmt: skip
    if batch is not None:
        status["batch"] = batch
    (work / "data" / "status.json").write_text(json.dumps(status))


def test_the_first_batch_shows_its_tokens_rate_and_eta_before_it_ends(qtbot, tmp_path):
    controller = _controller(qtbot, tmp_path)
    view = controller.view
    batch = {"source": "magpie", "number": 0, "phase": "answering", "answers": 0,
             "answer_tokens": 312, "seconds": 12.0}  # fmt: skip
    _status(tmp_path, batch, tokens_per_s=26.0, eta_s=26)
    controller.poll()
    line = view.generation_text.text()
    assert line.startswith(
        "0 / 1,000 answer tokens, 0 batches; 312 answer tokens so far in batch 1 (magpie); "
        "26 tokens/s; ETA 0m26s (running, 0m4"
    ), line
    assert "the first batch is running" not in line
    assert view.generation_bar.value() == 312  # of 1000: the bar moves with the batch

    _status(tmp_path, {**batch, "answers": 2, "answer_tokens": 530, "seconds": 20.0},
            tokens_per_s=26.5, eta_s=18)  # fmt: skip
    controller.poll()
    line = view.generation_text.text()
    assert "530 answer tokens so far in batch 1 (magpie), 2 answers finished; 26 tokens/s" in line
    assert "ETA 0m18s" in line and view.generation_bar.value() == 530


def test_a_batch_preparing_its_requests_says_so(qtbot, tmp_path):
    controller = _controller(qtbot, tmp_path)
    batch = {"source": "magpie", "number": 3, "phase": "requests", "answers": 0,
             "answer_tokens": 0, "seconds": 2.0}  # fmt: skip
    _status(tmp_path, batch)
    controller.poll()
    line = controller.view.generation_text.text()
    assert "0 batches; batch 4 (magpie) is preparing its requests; - tokens/s" in line
    assert "ETA estimating… (running" in line


def test_a_status_without_the_batch_record_reads_as_before(qtbot, tmp_path):
    controller = _controller(qtbot, tmp_path)
    _status(tmp_path, None)  # a job started before status.json carried the running batch
    controller.poll()
    line = controller.view.generation_text.text()
    assert line.startswith("0 / 1,000 answer tokens, 0 batches; - tokens/s; ETA estimating…")
    assert line.endswith("; the first batch is running")
    assert read_generation(tmp_path).batch is None
    assert controller.view.generation_bar.value() == 0
