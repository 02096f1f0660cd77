"""The status bar's state line and what may be pressed, from the `Session`.

`StatusController` observes the session: an activity, a target or the registries changing
rewords the state line ("ready", "loading…", "running…") and enables or disables Generate,
Compare, Stop and Load; a reported message becomes a status line (a note) or an error dialog
(`ErrorDialog`). Controllers that know more say it with `show(state)`: a run's own words
come from `RunStatusLine` (starting, prefilling N prompt tokens, running).
"""

from __future__ import annotations

from collections.abc import Callable

from app.error_dialog import ErrorDialog
from app.menus import Actions
from app.run_controller import RunController
from app.session import Activity, Session
from app.widgets.chat_view import ChatView
from app.widgets.compare_panel import ComparePanel
from app.widgets.models_panel import ModelsPanel
from app.widgets.prompt_panel import PromptPanel
from app.widgets.status_bar import StatusBar

NOTE_MS = 5000  # how long the status line keeps a note

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
        session.on_change(self._on_change)
        runs.progress.connect(lambda message, _: bar.showMessage(message, NOTE_MS))

    def _on_change(self, what: str) -> None:
        if what == "message":
            message = self.session.last_message
            if message is not None and message.error:
                self.errors.show(message.text, message.user)
            elif message is not None:
                self.bar.showMessage(message.text, NOTE_MS)
        elif what in ("activity", "target", "registries"):
            self.show()

    def words(self) -> str:
        """The state line when nobody has said more: what the session is doing."""
        activity = self.session.activity
        if activity in WORDS:
            return WORDS[activity]
        if activity in (Activity.LOADING, Activity.STARTING):
            return "loading…" if self.session.registries else "loading engine…"
        return "no model" if self.session.target is None else "ready"

    def show(self, state: str | None = None) -> None:
        """The state line (`state`, else the session's words) and what may be pressed now."""
        session, running = self.session, self.runs.running
        ready = session.ready()
        self.bar.set_state(state if state is not None else self.words())
        self.prompt.set_state(ready and not running, running)
        self.compare.set_busy(not ready)
        self.chat_view.set_busy(not ready)
        self.models.set_busy(session.busy)
        self.actions.generate.setEnabled(ready)
        self.actions.compare.setEnabled(ready)
        self.actions.stop.setEnabled(running or session.activity is Activity.MEASURING)
        self.actions.load.setEnabled(not session.busy)


class RunStatusLine:
    """A run's words on the state line: starting, prefilling N prompt tokens, then running
    from its first token on."""

    def __init__(self, show: Callable[[str], None]) -> None:
        self.show = show
        self._waiting = False  # for the first token

    def begun(self, label: str) -> None:
        self._waiting = True
        self.show(f"starting {label}…")  # its head or draft may load first

    def started(self, label: str, prompt_tokens: int) -> None:
        self.show(f"{label}: prefilling {prompt_tokens} prompt tokens…")

    def stepped(self, label: str) -> None:
        if self._waiting:  # the first token is out: from here the plots show progress
            self._waiting = False
            self.show(f"running {label}…")
