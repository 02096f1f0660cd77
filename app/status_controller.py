"""The status bar's state line and what may be pressed, from the `Session`.

`StatusController` observes the session: an activity, a target or the registries changing
rewords the state line ("ready", "loading…", "running…") and enables or disables Generate,
Compare, Stop and Load (Stop, the menu's and the prompt box's, is live for every job the window
runs: a run, a Compare, a chat turn, a sweep, Tune, and a run's autoregressive reference
measured in the background, during which the window is ready and the state line says so); a
reported message becomes a status line (a note, cut with "…" to the room the bar has, whole in
its tooltip) or an error dialog (`ErrorDialog`). Controllers that know more say it with
`show(state)`, and with `show(state, since)` a line that counts the seconds since `since` until
the next line: a run's own words come from `RunStatusLine` (starting, what the engine reports
before the prompt: loading the method's head or draft, timing forward passes for a tree, then
prefilling N prompt tokens, each counting, so a first run that loads a head or times the device
is seen to be alive; then running).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from PySide6.QtCore import QTimer

from app.engine_api import RunRequest
from app.error_dialog import ErrorDialog
from app.menus import Actions
from app.reference import MEASURING
from app.run_controller import RunController
from app.session import Activity, Session
from app.widgets.chat_view import ChatView
from app.widgets.compare_panel import ComparePanel
from app.widgets.models_panel import ModelsPanel
from app.widgets.prompt_panel import PromptPanel
from app.widgets.status_bar import StatusBar

NOTE_MS = 5000  # how long the status line keeps a note
TICK_MS = 1000  # how often a counting state line ("starting X… 12 s") is redrawn

WORDS = {
    Activity.RUNNING: "running…",
    Activity.MEASURING: "measuring…",
    Activity.ADAPTING: "adapting the head…",
}


class StatusController:
    def __init__(
        self,
        session: Session,
        runs: RunController,
        bar: StatusBar,
        errors: ErrorDialog,
        actions: Actions,
        prompt: PromptPanel,
        compare: ComparePanel,
        chat_view: ChatView,
        models: ModelsPanel,
    ) -> None:
        self.session, self.runs, self.bar, self.errors, self.actions = (
            session,
            runs,
            bar,
            errors,
            actions,
        )
        self.prompt, self.compare, self.chat_view, self.models = prompt, compare, chat_view, models
        self._counting: tuple[str, float] | None = None  # (state, since) of a counting line
        self._ticker = QTimer()
        self._ticker.setInterval(TICK_MS)
        self._ticker.timeout.connect(self._tick)
        session.on_change(self._on_change)
        runs.progress.connect(lambda message, _: self.note(message))
        runs.background_changed.connect(lambda: self.show())

    def _on_change(self, what: str) -> None:
        if what == "message":
            message = self.session.last_message
            if message is not None and message.error:
                self.errors.show(message.text, message.user)
            elif message is not None:
                self.note(message.text)
        elif what in ("activity", "target", "registries"):
            self.show()

    def note(self, text: str, ms: int = NOTE_MS) -> None:
        """A note on the status bar for `ms`, cut with "…" to the room the bar leaves it (the
        whole text in the bar's tooltip) and fitted again as that room changes, so it never
        ends mid-word at the window's edge (`StatusBar.note`)."""
        self.bar.note(text, ms)

    def words(self) -> str:
        """The state line when nobody has said more: what the session is doing."""
        activity = self.session.activity
        if activity in WORDS:
            return WORDS[activity]
        if activity in (Activity.LOADING, Activity.STARTING):
            return "loading…" if self.session.registries else "loading engine…"
        if self.runs.measuring_reference:
            return MEASURING
        return "no model" if self.session.target is None else "ready"

    def show(self, state: str | None = None, since: float | None = None) -> None:
        """The state line (`state`, else the session's words) and what may be pressed now;
        with `since` (time.monotonic()) the line counts the seconds from then until the next
        line is shown."""
        session, running = self.session, self.runs.running
        ready = session.ready()
        busy = session.activity in (Activity.RUNNING, Activity.MEASURING)
        stoppable = running or busy or self.runs.measuring_reference
        self._counting = (state, since) if state is not None and since is not None else None
        if self._counting is None:
            self._ticker.stop()
            self.bar.set_state(state if state is not None else self.words())
        else:
            self._ticker.start()
            self._tick()
        self.prompt.set_state(ready and not running, stoppable)
        self.compare.set_busy(not ready)
        self.chat_view.set_busy(not ready)
        self.models.set_busy(session.busy)
        self.actions.generate.setEnabled(ready)
        self.actions.compare.setEnabled(ready)
        self.actions.stop.setEnabled(stoppable)
        self.actions.load.setEnabled(not session.busy)

    def _tick(self) -> None:
        if self._counting is None:
            self._ticker.stop()
            return
        state, since = self._counting
        self.bar.set_state(f"{state} {time.monotonic() - since:.0f} s")


def sizes_tree(session: Session, request: RunRequest) -> bool:
    """Whether the request's method chooses its tree's size by timed forward passes: a tree
    method left on auto size (the engine times them before the prompt, once per model and head)."""
    info = session.registries.method(request.method) if session.registries is not None else None
    return info is not None and info.tree and request.config.tree_tokens is None


class RunStatusLine:
    """A run's words on the state line, each counting the seconds (`show(state, since)`) until
    its first token: starting; what the engine reports meanwhile (loading the method's head or
    draft, a download); once that is loaded, timing forward passes when the method sizes its
    tree by them (an auto-sized tree: the engine times them before the prompt, the first time a
    model or head is used); prefilling N prompt tokens; then running from its first token on."""

    def __init__(self, show: Callable[..., None]) -> None:
        self.show = show
        self._waiting = False  # for the first token
        self._label: str | None = None  # the run's method, until its prefill begins
        self._sizes_tree = False  # whether that method times forward passes to size its tree

    def begun(self, label: str, sizes_tree: bool = False) -> None:
        self._waiting = True
        self._label, self._sizes_tree = label, sizes_tree
        self.show(f"starting {label}…", time.monotonic())  # its head or draft may load first

    def progress(self, message: str, fraction: float) -> None:
        """The engine's word before the prefill ("loading head 'embedded'", 0.0), then what
        follows once it is done (fraction 1.0); ignored once the prefill has begun."""
        label = self._label
        if label is None:
            return
        if fraction < 1.0:
            self.show(f"{label}: {message}…", time.monotonic())
        elif self._sizes_tree:
            self.show(f"{label}: timing forward passes to size its tree…", time.monotonic())
        else:
            self.show(f"starting {label}…", time.monotonic())

    def started(self, label: str, prompt_tokens: int) -> None:
        self._label = None
        self.show(f"{label}: prefilling {prompt_tokens} prompt tokens…", time.monotonic())

    def stepped(self, label: str) -> None:
        if self._waiting:  # the first token is out: from here the plots show progress
            self._waiting = False
            self.show(f"running {label}…")

    def ended(self) -> None:
        """The run finished or failed: later progress is another run's."""
        self._label, self._waiting = None, False
