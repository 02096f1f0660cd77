"""An engine for the engine process in tests, built there by `ProcessEngine(SlowEngine)`: one
torch thread (tiny models), and runs that last long enough to be stopped."""

from __future__ import annotations

import time

from app.engine import SpecdecEngine

STEP_SECONDS = 0.05  # a pause after each step of SlowEngine's runs
BOOM = "boom"  # SlowEngine raises ValueError on this prompt: a failure that is not the user's


class SlowEngine(SpecdecEngine):
    def __init__(self) -> None:
        import torch

        torch.set_num_threads(1)
        super().__init__()

    def events(self, request, stop, progress):
        from specdec_core.decoding.events import Step

        if request.prompt == BOOM:
            raise ValueError("the engine broke")
        for event in super().events(request, stop, progress):
            yield event
            if isinstance(event, Step):
                time.sleep(STEP_SECONDS)
