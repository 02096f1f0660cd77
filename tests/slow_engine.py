"""A deliberately slow engine for the tests of Stop: the real engine (app/engine.py: the decode
loop, the measurement of sweeps and Tune) on a tiny random target whose every forward takes
`Pace.seconds` (0 until a test sets it), so "Stop ends the job within one decode step" is
checked without a busy machine.

`Pace` also says when a slow forward has begun (`begun`), so a test presses Stop in the middle
of a step, and records how long each forward took."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from app.engine import SpecdecEngine
from app.engine_api import LoadSettings, Progress, StopFlag, TargetInfo
from specdec_core.models import LoadedModel
from tests.tiny import tiny_loaded

# a chat template for the tiny word-level tokenizer (Tune's prompts and chat turns use one)
TEMPLATE = (
    "{% for m in messages %}<s> {{ m['content'] }} </s> {% endfor %}"
    "{% if add_generation_prompt %}<s> {% endif %}"
)
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
    target.tokenizer.chat_template = TEMPLATE
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
        self,
        spec: str,
        device: str,
        dtype: str,
        progress: Progress,
        stop: StopFlag | None = None,
        settings: LoadSettings | None = None,
    ) -> TargetInfo:
        self.loads.append(spec)
        return TargetInfo(spec, "cpu", "float32", 50_000, {})
