"""Generate: one run of the chosen method in the Output tab, and its measured speedup.

The answer comes at the method's speed: its summary (τ, tokens/s) is shown when its run
ends, and the window is ready for the next action at once. The speedup comes from an
autoregressive reference of the same prompt and sampling settings (app/reference.py), which
never holds the window:

- reused, where one was measured before on this machine for the same target, dtype, prompt and
  settings (app/reference_store.py): its speedup is shown with the answer, marked as reused
  and when it was measured, while the first `CHECK_STEPS` steps of the reference are timed
  again in the background; when they end the line says whether the kept reference still held
  (within 25 %) or was re-timed to the machine's pace now;
- otherwise measured after the answer in the background ("measuring the autoregressive
  reference…" under the summary and on the state line, drawn grey in the plots, not in the
  token view), and filled in when it ends, marked as measured just now; that reference is
  then kept for the next time.

Whatever the user does next (Generate, Compare, a chat turn, a load, Tune, Stop) cancels a
reference in the background: a cancelled reference shows no speedup (a reused one keeps its
line, marked not re-timed). A speedup above τ is a timing disturbance as before, and the
reference it was against is not kept. An `ar` run is its own reference and is kept as one.
Run ▸ Measure the speedup (`References.on`) turns the reference off: the summary then says so.
`SingleRunController` owns its requests (a `RunOwner`): it alone hears their events.
"""

from __future__ import annotations

from collections.abc import Callable

from app import history
from app.engine_api import RunRequest
from app.palette import REFERENCE_COLOR
from app.reference import (
    CANCELLED,
    MEASURING,
    OFF,
    OWN_REFERENCE,
    REFERENCE,
    Reference,
    References,
    check_request,
    measured,
    reference_request,
    speedup_text,
)
from app.reference_store import KeptReference
from app.run_parts import PartsOwner, RunParts
from app.status_controller import RunStatusLine, sizes_tree
from app.widgets.output_panel import OutputPanel
from specdec_core.decoding.events import RunSummary, Started, Step
from specdec_core.measurement.run_speedup import StepTime


class SingleRunController(PartsOwner):
    def __init__(
        self,
        parts: RunParts,
        output: OutputPanel,
        show_state: Callable[[str], None],
        show_tab: Callable[[], None],
        references: References,
    ) -> None:
        super().__init__(parts)
        self.output, self.show_state, self.show_tab = output, show_state, show_tab
        self.references = references
        self.line = RunStatusLine(show_state)
        self.run: RunRequest | None = None  # the run of the last Generate
        self.reference: RunRequest | None = None  # its reference, or the re-timing of a kept one
        self.kept: KeptReference | None = None  # the kept reference being re-timed
        self.measured: RunSummary | None = None  # the run's summary, once finished
        self.steps: list[StepTime] = []  # the run's steps, timed
        self.reference_steps: list[StepTime] = []  # its reference's
        self.speedup_line = ""  # what the summary says of the speedup ("" : nothing)
        self.runs.progress.connect(self._progress)

    def _progress(self, message: str, fraction: float) -> None:
        """What the engine reports before the run's prefill (its head or draft loading)."""
        if self.run is not None and self.runs.current is self.run:
            self.line.progress(message, fraction)

    def generate(self) -> bool:
        """Run the chosen method on the prompt; its reference follows in the background."""
        self.output.clear()
        self.plots.reset()
        self.show_tab()
        run = self.inputs.request(self.inputs.method())
        self.run, self.reference, self.kept, self.measured = run, None, None, None
        self.steps, self.reference_steps, self.speedup_line = [], [], ""
        return self.runs.run_queue([run], self)

    def _series(self, request: RunRequest) -> str:
        label = self.style.label(request.method)
        return f"{label} (reference)" if request is self.reference else label

    # -- the events of its runs ---------------------------------------------------------------
    def begun(self, request: RunRequest) -> None:
        if request is self.reference:
            self.plots.begin_series(self._series(request), REFERENCE_COLOR)
            return
        self.plots.begin_series(self._series(request), self.style.color(request.method))
        self.line.begun(self.style.label(request.method), sizes_tree(self.inputs.session, request))

    def started(self, request: RunRequest, started: Started) -> None:
        if request is self.run:
            self.line.started(self.style.label(request.method), started.prompt_token_count)

    def stepped(self, request: RunRequest, step: Step) -> None:
        if request is self.reference:
            self.reference_steps.append(StepTime.of(step))
        elif request is self.run:
            self.steps.append(StepTime.of(step))
            self.line.stepped(self.style.label(request.method))
            self.output.view.add_step(step)
        else:
            return  # an earlier Generate's reference, cancelled by this one
        if self._series(request) in self.plots.series:  # a Compare or chat may have reset them
            self.plots.add_step(self._series(request), step)

    def failed(self, request: RunRequest, message: str, user: bool) -> None:
        if request is self.run:
            self.line.ended()
        elif request is self.reference:  # cancelled before it ran, or the engine failed
            self._reference_finished(None)

    def finished(self, request: RunRequest, summary: RunSummary) -> None:
        if request is self.reference:
            self.plots.redraw()
            self._reference_finished(summary)
        elif request is self.run:
            self.line.ended()
            self.plots.redraw()
            history.record(summary, request.prompt)
            self.inputs.remember_extra(summary.method)
            self.measured = summary
            self._answered(request, summary)

    def _answered(self, run: RunRequest, summary: RunSummary) -> None:
        """The answer is in: its summary at once, then its speedup as the reference allows."""
        if summary.stop_reason == "stopped":
            self._show("")
        elif run.method == REFERENCE:  # an autoregressive run is its own reference
            self.references.keep(run, summary, self.steps)
            self._show(OWN_REFERENCE)
        elif not self.references.on():
            self._show(OFF)
        elif (kept := self.references.kept(run)) is not None:
            self.kept, self.reference = kept, check_request(run, kept)
            self._show(self._against(Reference.kept(kept, checking=True), final=False))
            self.runs.run_background(self.reference, self)
        else:
            self.reference = reference_request(run)
            self._show(MEASURING)
            self.runs.run_background(self.reference, self)

    def _reference_finished(self, reference: RunSummary | None) -> None:
        """The reference ended (`reference`), or will not run (None)."""
        run = self.run
        if run is None or self.measured is None:
            return
        done = reference is not None and reference.stop_reason != "stopped"
        if self.kept is not None:  # the re-timing of a kept reference
            check = self.reference_steps if done else None
            self._show(self._against(Reference.kept(self.kept, check)))
            return
        if reference is None or not done:
            self._show(CANCELLED)
            return
        measured_now = Reference.measured_now(reference, self.reference_steps)
        found = measured(self.measured, measured_now, self.steps)
        if found is not None and not found.disturbed:
            self.references.keep(run, reference, self.reference_steps)
        self._show(self._against(measured_now))

    def _against(self, reference: Reference, final: bool = True) -> str:
        """The speedup line against `reference`; a reused one that gives a disturbed ratio
        once re-timed (`final`) is dropped, so the next Generate measures both again."""
        assert self.measured is not None and self.run is not None
        found = measured(self.measured, reference, self.steps)
        if final and found is not None and found.disturbed and reference.reused:
            self.references.forget(self.run)
        return speedup_text(self.measured, reference, self.steps)

    def _show(self, speedup_line: str) -> None:
        """The run's summary, and under it what is known of its speedup."""
        if self.measured is None:
            return
        self.speedup_line = speedup_line
        self.output.show_summary(self.style.label(self.measured.method), self.measured)
        if speedup_line:
            label = self.output.summary
            label.setText(f"{label.text()}\n{speedup_line}")
