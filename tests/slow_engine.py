"""A deliberately slow engine for the tests of Stop: the real engine (app/engine.py: the decode
loop, the measurement of sweeps and Tune) on a tiny random target whose every forward takes
`Pace.seconds` (0 until a test sets it), so "Stop ends the job within one decode step" is
checked without a busy machine.

`Pace` also says when a slow forward has begun (`begun`), so a test presses Stop in the middle
of a step. `train_tab` points the window's Train tab at a tiny target (the `train_target`
fixture) with its children made slow (tests/slow_child.py)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace

import pytest

from app.engine import SpecdecEngine
from app.engine_api import Progress, StopFlag, TargetInfo, TargetRequest
from specdec_core.models.loading import LoadedModel
from tests.tiny import CHAT_TEMPLATE, chat_target, tiny_loaded

# a window on this engine starts on a method that needs no draft or head
SETTINGS = {"method": "ngram", "compare_methods": ["ngram"], "max_new_tokens": 64}


@dataclass
class Pace:
    """Sleeps `seconds` before every forward of the target's decoder (0: full speed)."""

    seconds: float = 0.0
    begun: threading.Event = field(default_factory=threading.Event)  # a slow forward began
    forwards: int = 0

    def __call__(self, module, args, kwargs) -> None:
        self.forwards += 1
        if self.seconds:
            self.begun.set()
            time.sleep(self.seconds)

    def slow(self, seconds: float) -> None:
        """From the next forward on, each takes `seconds` more; `begun` is cleared."""
        self.begun.clear()
        self.seconds = seconds


def slow_target(pace: Pace, seed: int = 1) -> LoadedModel:
    """A tiny random target with a chat template whose decoder waits `pace` per forward."""
    target = tiny_loaded(seed)
    target.tokenizer.chat_template = CHAT_TEMPLATE
    target.model.model.register_forward_pre_hook(pace, with_kwargs=True)
    return target


class SlowEngine(SpecdecEngine):
    """The engine in the window's process on `slow_target`; a load keeps that target (the
    window loads one at start)."""

    def __init__(self) -> None:
        self.pace = Pace()
        super().__init__(slow_target(self.pace))
        self.loads: list[str] = []

    def load_target(
        self, target: TargetRequest, progress: Progress, stop: StopFlag | None = None
    ) -> TargetInfo:
        self.loads.append(target.spec)
        return TargetInfo(target.spec, "cpu", "float32", 50_000, {})


# -- the Train tab's children, slowed ----------------------------------------------------------
@pytest.fixture(name="train_target", scope="module")
def train_target_fixture(tmp_path_factory):
    """A tiny target with a chat template and ShareGPT-like conversations for the data job."""
    root = tmp_path_factory.mktemp("train-stop")
    return chat_target(root, conversations=200), root / "chats.json"


def aim_train_tab(controller, train_target, **sizes) -> None:
    """Points the Train tab's `controller` at the tiny target and its conversations
    (`train_target`: the fixture's pair), for a small job of 1k answer tokens: `sizes` are the
    template's batch, long_batch, batch_tokens and epochs."""
    target, chats = train_target
    controller.target = lambda: str(target)
    controller.template = replace(
        controller.template, rows=4, max_new_tokens=12, dtype="float32",
        conversations=str(chats), draft_vocab=16, val_kinds=0, save_every=1, **sizes,
    )  # fmt: skip
    controller.view.tokens.setValue(1)  # 1k answer tokens


def train_tab(window, train_target, monkeypatch, generation: float, training: float):
    """The window's Train tab on the tiny target, its children slowed: each answer batch of
    the data job takes `generation` seconds more, each training step `training`."""
    from app.training_plan import TrainingPlan
    from tests.slow_child import slow_argv

    controller = window.training
    aim_train_tab(controller, train_target, batch=4, long_batch=2, batch_tokens=256, epochs=50)
    generation_argv, training_argv = TrainingPlan.generation_argv, TrainingPlan.training_argv
    monkeypatch.setattr(
        TrainingPlan, "generation_argv", lambda plan: slow_argv(generation_argv(plan), generation)
    )
    monkeypatch.setattr(
        TrainingPlan,
        "training_argv",
        lambda plan, seconds=None: slow_argv(training_argv(plan, seconds), training),
    )
    window.tabs.setCurrentWidget(controller.view)
    return controller


def with_held_out_answers(train_target, layout: str = "eagle1") -> None:
    """Put the tiny target's answers to the held-out prompts of every kind where the Train
    tab's training will look for them (its work folder), as an earlier run leaves them:
    `specdec train --data JOB` answers them before its budget can say anything (a minute on a
    busy machine, even for a tiny target), and the test is about the budget after that."""
    import shutil

    from app.training_plan import default_work
    from specdec_core.models.loading import load_model
    from specdec_core.training.validation import held_out_by_kind

    target, _ = train_target
    cache = target.parent / "held"
    if not (cache / "kinds-heldout").is_dir():
        loaded = load_model(str(target), "cpu", "float32")
        held_out_by_kind(loaded, cache, 3)
    work = default_work(str(target), layout) / "head" / "work"
    shutil.copytree(cache / "kinds-heldout", work / "kinds-heldout", dirs_exist_ok=True)
