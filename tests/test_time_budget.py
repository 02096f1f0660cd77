"""`specdec train --seconds` is one budget for the whole run, on a tiny target whose training
steps (or the target's forwards) are made to take seconds: the run ends by the budget plus one
batch with the head it has, prints where it is at least every few seconds (inside a batch too),
counts each batch's target forward in training's time (the features are computed as training
goes), and a budget that cannot cover one batch is refused at the start with what would."""

from __future__ import annotations

import json
import re
import time

import pytest

from app.training_plan import read_generation
from specdec_core.cli import main
from specdec_core.training import (
    common_training,
    driver,
    loop,
    online_features,
    time_budget,
    training_set,
)
from specdec_core.training.progress_file import read_progress
from tests.gui_window import make_window_fixture  # noqa: F401 (a fixture)
from tests.slow_engine import (
    train_tab,
    train_target_fixture,  # noqa: F401 (a fixture)
    with_held_out_answers,
)
from tests.tiny import training_dir

BATCH = 1.0  # seconds a slowed training step takes
SLACK = 8.0  # loading, saving and a busy machine (tests in parallel), beyond budget + one batch
EXIT = 10.0  # a child's own exit and the next one's start (torch's imports) on a busy machine


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return training_dir(tmp_path_factory.mktemp("budget"))


def _argv(tiny_dir, out, seconds: float, *extra: str) -> list[str]:
    return [
        *("train", "eagle", "--target", str(tiny_dir / "target")),
        *("--data", str(tiny_dir / "data.jsonl"), "--tokens", "800", "--epochs", "1000"),
        *("--draft-vocab", "16", "--batch-tokens", "256", "--feature-dtype", "float32"),
        *("--seconds", f"{seconds:g}", "--out", str(out), *extra),
    ]


def _slow_steps(monkeypatch, seconds: float, probe_too: bool = False) -> list[float]:
    """Every training step (and with `probe_too` the probe's) takes `seconds` more; -> the
    instants each began."""
    began: list[float] = []
    step = loop.train_step

    def slow(*args, **kwargs):
        began.append(time.monotonic())
        time.sleep(seconds)
        return step(*args, **kwargs)

    monkeypatch.setattr(loop, "train_step", slow)
    if probe_too:
        monkeypatch.setattr(driver, "train_step", slow)
    return began


def _beat(monkeypatch, seconds: float) -> None:
    """Progress lines every `seconds` (the product says one at least every few seconds)."""
    for module in (time_budget, common_training, training_set):
        monkeypatch.setattr(module, "HEARTBEAT_S", seconds)


def _gaps(lines: list[str]) -> list[float]:
    """Seconds between the progress lines (each stamped by `_stamped`)."""
    times = [float(line.split(" ", 1)[0]) for line in lines]
    return [b - a for a, b in zip(times, times[1:], strict=False)]


def _timed_train(tiny_dir, out, seconds: float, *extra: str) -> tuple[int, float]:
    """`specdec train` on `tiny_dir` into `out` with `--seconds seconds`; -> its exit code and
    the seconds it took."""
    began = time.monotonic()
    code = main(_argv(tiny_dir, out, seconds, *extra))
    return code, time.monotonic() - began


def _print_timing(run: str, took: float, lines: str, gaps: list[float]) -> None:
    """What `run` took, and how far apart its progress `lines` came."""
    apart = max(gaps, default=0)
    print(f"\n{run}: {took:.1f} s, {lines} at most {apart:.2f} s apart (heartbeat 0.5 s)")


@pytest.fixture
def stamped(monkeypatch):
    """The run's progress lines on stderr, each with the instant it was printed."""
    lines: list[str] = []

    def log(message: str) -> None:
        lines.append(f"{time.monotonic():.3f} {message}")

    for module in (driver, training_set):
        monkeypatch.setattr(module, "log", log)
    return lines


@pytest.mark.slow
def test_training_ends_by_the_budget_plus_one_batch_with_progress_inside_batches(
    tiny_dir, tmp_path, monkeypatch, stamped
):
    _beat(monkeypatch, 0.5)
    steps = _slow_steps(monkeypatch, 2.5)  # a batch outlasts several progress lines
    seconds = 16.0  # room for features and a few batches on a busy machine
    out = tmp_path / "head"
    progress_file = tmp_path / "progress.json"
    code, took = _timed_train(tiny_dir, out, seconds, "--progress-file", str(progress_file))
    assert code == 0
    training = [line for line in stamped if " training: " in line]
    run, lines = (
        f"--seconds {seconds:g} with 2.5 s batches",
        f"{len(steps)} batches, progress lines",
    )
    _print_timing(run, took, lines, _gaps(training))
    assert took < seconds + 2.5 + SLACK
    card = json.loads((out / "specdec_card.json").read_text())
    assert card["history"][-1]["stopped"] == "time" and card["epochs"] < 1000
    assert training and all("tokens/s" in line or "no rate yet" in line for line in training)
    assert any("running" in line and "batch" in line for line in training)  # inside a batch
    assert any("budget" in line and "left" in line for line in training)
    assert max(_gaps(training)) < 2.4  # never a 2.5 s batch without a line
    done = read_progress(progress_file)
    assert done is not None and done.finished


@pytest.mark.slow
def test_a_budget_that_cannot_cover_one_batch_is_refused_at_the_start(
    tiny_dir, tmp_path, monkeypatch, capsys
):
    _slow_steps(monkeypatch, 1.5, probe_too=True)  # the probe sees the slow step too
    out = tmp_path / "head"
    code, took = _timed_train(tiny_dir, out, 4.0)
    assert code == 2
    error = capsys.readouterr().err
    assert "cannot cover one training batch" in error
    needed = int(re.search(r"give --seconds (\d+) or more", error).group(1))
    assert needed > 4
    assert took < 4.0 + 2 * 1.5 + SLACK  # said before any feature or batch, not at the end
    assert not (out / "checkpoint.pt").exists()


@pytest.mark.slow
def test_slow_target_forwards_are_part_of_training_which_ends_by_the_budget(
    tiny_dir, tmp_path, monkeypatch, stamped
):
    _beat(monkeypatch, 0.5)
    forward = online_features.target_features
    forwards: list[float] = []

    def slow_forward(*args, **kwargs):
        forwards.append(time.monotonic())
        time.sleep(0.3)
        return forward(*args, **kwargs)

    monkeypatch.setattr(online_features, "target_features", slow_forward)
    seconds = 10.0
    out = tmp_path / "head"
    code, took = _timed_train(tiny_dir, out, seconds)
    assert code == 0
    training = [line for line in stamped if " training: " in line]
    run = f"--seconds {seconds:g} with 0.3 s target forwards"
    _print_timing(run, took, "training lines", _gaps(training))
    assert took < seconds + 0.6 + SLACK
    assert not any(" features: " in line for line in stamped)  # no stage of its own
    card = json.loads((out / "specdec_card.json").read_text())
    collected = next(line for line in stamped if " sequences, " in line and "data:" in line)
    offered = int(re.search(r"data: (\d+) sequences", collected).group(1))
    assert card["sequences"] == offered  # the whole data planned: nothing waits for features
    steps = card["history"][-1]["step"]
    assert steps >= 1 and card["history"][-1]["stopped"] == "time"
    assert len(forwards) >= steps  # one target forward per batch, inside training


# -- the Train tab: one budget for generation and training ------------------------------------
@pytest.mark.slow
def test_the_train_tab_shares_its_minutes_between_generation_and_training(
    qtbot, make_window, monkeypatch, train_target
):
    window = make_window()
    with_held_out_answers(train_target)
    controller = train_tab(window, train_target, monkeypatch, generation=2.0, training=1.0)
    controller.view.tokens.setValue(50)  # far more than the budget can generate
    controller.view.minutes.setValue(0.8)
    budget = 48.0
    lines: list[str] = []
    first_batch: list[float] = []
    began = time.monotonic()
    controller.view.start_button.click()

    def seen() -> bool:
        lines.append(controller.view.generation_text.text())
        done = read_generation(controller.plan.work)
        if not first_batch and done is not None and done.batches:
            first_batch.append(time.monotonic() - began)
        return controller.step == "training"

    qtbot.waitUntil(seen, timeout=int(3 * budget * 1000))
    generation_ended = time.monotonic() - began
    qtbot.waitUntil(
        lambda: not controller.running and controller.step == "", timeout=int(budget * 1000)
    )
    took = time.monotonic() - began
    print(
        f"\nTrain tab, {budget:g} s: first batch {first_batch[0]:.0f} s, generation "
        f"{generation_ended:.0f} s, all {took:.0f} s"
    )
    # generation: its share, or its first batch when that came later; then the child's exit
    assert generation_ended < max(budget / 2, first_batch[0]) + EXIT
    if first_batch[0] < budget / 2:  # the budget, one training step, and what no budget
        assert took < budget + 1.0 + 2 * EXIT  # in a child sees: its start and exit
    assert controller.plan.budget_mark.is_file()
    assert any("budget" in line and "ETA 0m" in line for line in lines)  # an ETA, not "?"
    log = (controller.plan.work / "training.log").read_text()
    assert "training for at most" in log or "cannot cover one training batch" in log
    if "cannot cover" not in log:
        assert controller.view.compare_button.isEnabled()  # the head is ready
