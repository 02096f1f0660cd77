"""Generate: one run of the chosen method in the Output tab, and its measured speedup.

Every speculative run is followed by an autoregressive run of the same prompt and sampling
settings (app/reference.py), measured right after it so that both are timed under the same
conditions (no reference is kept from an earlier Generate); the reference is drawn in the
plots beside the run (grey) but not in the token view, and the summary gets the speedup line,
with its 95 % interval over both runs' steps, once both are measured. An `ar` run is its own
reference; a Stop during the reference ends it and no speedup is shown. `SingleRunController`
owns its requests (a `RunOwner`): it alone hears their events.
"""

from __future__ import annotations

from collections.abc import Callable

from app import history
from app.engine_api import RunRequest
from app.palette import REFERENCE_COLOR
from app.reference import OWN_REFERENCE, REFERENCE, reference_request, speedup_text
from app.run_parts import PartsOwner, RunParts
from app.status_controller import RunStatusLine, sizes_tree
from app.widgets.output_panel import OutputPanel
from specdec_core.decoding.events import RunSummary, Started, Step
from specdec_core.measurement.run_speedup import StepTime

MEASURING = "measuring the autoregressive reference for the speedup…"


class SingleRunController(PartsOwner):
    def __init__(
        self,
        parts: RunParts,
        output: OutputPanel,
        show_state: Callable[[str], None],
        show_tab: Callable[[], None],
    ) -> None:
        super().__init__(parts)
        self.output, self.show_state, self.show_tab = output, show_state, show_tab
        self.line = RunStatusLine(show_state)
        self.run: RunRequest | None = None  # the run of the last Generate
        self.reference: RunRequest | None = None  # its reference (none for an `ar` run)
        self.measured: RunSummary | None = None  # the run's summary, once finished
        self.steps: list[StepTime] = []  # the run's steps, timed
        self.reference_steps: list[StepTime] = []  # its reference's
        self.speedup_line = ""  # the last run's measured speedup
        self.runs.progress.connect(self._progress)

    def _progress(self, message: str, fraction: float) -> None:
        """What the engine reports before the run's prefill (its head or draft loading)."""
        if self.run is not None and self.runs.current is self.run:
            self.line.progress(message, fraction)

    def generate(self) -> bool:
        """Run the chosen method on the prompt, then its reference right after it."""
        self.output.clear()
        self.plots.reset()
        self.show_tab()
        run = self.inputs.request(self.inputs.method())
        queue = [run]
        self.run, self.reference, self.measured = run, None, None
        self.steps, self.reference_steps, self.speedup_line = [], [], ""
        if run.method != REFERENCE:
            self.reference = reference_request(run)  # adjacent in time: the same conditions
            queue.append(self.reference)
        return self.runs.run_queue(queue, self)

    def _series(self, request: RunRequest) -> str:
        label = self.style.label(request.method)
        return f"{label} (reference)" if request is self.reference else label

    # -- the events of its runs ---------------------------------------------------------------
    def begun(self, request: RunRequest) -> None:
        if request is self.reference:
            self.plots.begin_series(self._series(request), REFERENCE_COLOR)
            summary = self.output.summary
            summary.setText(f"{summary.text()}\n{MEASURING}".strip())
            self.show_state(MEASURING)
            return
        self.plots.begin_series(self._series(request), self.style.color(request.method))
        self.line.begun(self.style.label(request.method), sizes_tree(self.inputs.session, request))

    def started(self, request: RunRequest, started: Started) -> None:
        if request is not self.reference:
            self.line.started(self.style.label(request.method), started.prompt_token_count)

    def stepped(self, request: RunRequest, step: Step) -> None:
        if request is self.reference:
            self.reference_steps.append(StepTime.of(step))
        else:
            self.steps.append(StepTime.of(step))
            self.line.stepped(self.style.label(request.method))
            self.output.view.add_step(step)
        self.plots.add_step(self._series(request), step)

    def failed(self, request: RunRequest, message: str, user: bool) -> None:
        self.line.ended()

    def finished(self, request: RunRequest, summary: RunSummary) -> None:
        self.line.ended()
        self.plots.redraw()
        if request is self.reference:
            if self.measured is not None:
                self._show(self.measured, summary)
            return
        history.record(summary, request.prompt)
        self.inputs.remember_extra(summary.method)
        self.measured = summary
        self._show(summary, None)

    def _show(self, summary: RunSummary, reference: RunSummary | None) -> None:
        """The run's summary, with its speedup once the reference is measured (a stopped run
        or reference gives none)."""
        self.output.show_summary(self.style.label(summary.method), summary)
        if summary.stop_reason == "stopped":
            return
        if self.reference is None:  # an autoregressive run is its own reference
            self.speedup_line = OWN_REFERENCE
        elif reference is not None and reference.stop_reason != "stopped":
            self.speedup_line = speedup_text(summary, reference, self.steps, self.reference_steps)
        else:
            return
        label = self.output.summary
        label.setText(f"{label.text()}\n{self.speedup_line}")
