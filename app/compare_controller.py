"""Compare: the methods ticked in the Compare tab, one after another on the same prompt, each
in a column of its own and a row of the table.

A failing method skips only itself. Every method of one Compare drafts from the suffix
history as it was when the Compare began (`RunRequest.comparison`), so none drafts from
another's output of the same prompt. Autoregressive runs first: each method's speedup is
against that run of the same Compare, with its 95 % interval over the two runs' steps (each
step's tokens and seconds are kept for it, `app/export.py`). `CompareController` owns its
requests (a `RunOwner`). A Compare that Stop ends is marked stopped: the run it cut short
reads "stopped" in its column and row, and the tab names the methods that never ran.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from app import history
from app.engine_api import RunRequest
from app.export import CompareResult
from app.run_parts import PartsOwner, RunParts
from app.status_controller import RunStatusLine, sizes_tree
from app.widgets.compare_panel import ComparePanel
from specdec_core.decoding.events import RunSummary, Started, Step
from specdec_core.measurement.run_speedup import StepTime


class CompareController(PartsOwner):
    def __init__(
        self,
        parts: RunParts,
        panel: ComparePanel,
        show_state: Callable[[str], None],
        show_tab: Callable[[], None],
    ) -> None:
        super().__init__(parts)
        self.panel, self.show_tab = panel, show_tab
        self.line = RunStatusLine(show_state)
        self.steps: dict[str, list[StepTime]] = {}  # method -> its steps in this Compare
        self._current: RunRequest | None = None  # the run of this Compare under way
        self.requests: list[RunRequest] = []  # this Compare's runs, in order
        self.runs.progress.connect(self._progress)

    def _progress(self, message: str, fraction: float) -> None:
        """What the engine reports before a run's prefill (its head or draft loading)."""
        if self._current is not None and self.runs.current is self._current:
            self.line.progress(message, fraction)

    def run(self) -> bool:
        self.panel.begin()
        self.plots.reset()
        self.show_tab()
        self.steps = {}
        comparison = uuid.uuid4().hex  # suffix methods draft from the history as it began
        requests = [self.inputs.request(m, comparison) for m in self.panel.selected()]
        self.requests = requests
        return self.runs.run_queue(requests, self, keep_going=True, compare=True)

    # -- the events of its runs ---------------------------------------------------------------
    def begun(self, request: RunRequest) -> None:
        label, color = self.style.label(request.method), self.style.color(request.method)
        self.plots.begin_series(label, color)
        self.panel.columns.add_column(request.method, label, color)
        self.steps[request.method] = []
        self._current = request
        self.line.begun(label, sizes_tree(self.inputs.session, request))

    def started(self, request: RunRequest, started: Started) -> None:
        self.line.started(self.style.label(request.method), started.prompt_token_count)

    def stepped(self, request: RunRequest, step: Step) -> None:
        label = self.style.label(request.method)
        self.line.stepped(label)
        self.steps.setdefault(request.method, []).append(StepTime.of(step))
        self.panel.columns.add_step(request.method, step)
        self.plots.add_step(label, step)

    def finished(self, request: RunRequest, summary: RunSummary) -> None:
        self.line.ended()
        self.plots.redraw()
        history.record(summary, request.prompt)
        self.inputs.remember_extra(summary.method)
        method = summary.method
        label, color = self.style.label(method), self.style.color(method)
        steps = tuple(self.steps.get(request.method, ()))
        self.panel.add_result(CompareResult(method, label, color, summary, steps))
        if summary.stop_reason == "stopped":  # Stop ended the Compare here
            after = self.requests[self.requests.index(request) + 1 :]
            self.panel.show_stopped(label, [self.style.label(r.method) for r in after])

    def failed(self, request: RunRequest, message: str, user: bool) -> None:
        self.line.ended()
        self.panel.fail(request.method, message)
