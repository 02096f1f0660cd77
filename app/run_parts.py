"""What the controllers that start runs (Generate, Compare, Chat) share: the run queue, the
inputs a request is read from, the methods' labels and colours, and the live plots."""

from __future__ import annotations

from dataclasses import dataclass

from app.method_style import MethodStyle
from app.run_controller import RunController, RunOwner
from app.run_inputs import RunInputs
from app.widgets.plots_panel import PlotsPanel


@dataclass(frozen=True)
class RunParts:
    runs: RunController
    inputs: RunInputs
    style: MethodStyle
    plots: PlotsPanel


class PartsOwner(RunOwner):
    """A `RunOwner` that runs with `RunParts`, kept as its attributes of the same names."""

    def __init__(self, parts: RunParts) -> None:
        self.runs, self.inputs = parts.runs, parts.inputs
        self.style, self.plots = parts.style, parts.plots
