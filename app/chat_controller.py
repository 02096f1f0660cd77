"""Chat mode: each Generate sends the prompt box as the next user message of a conversation.

The chat template is applied over the whole history (the engine renders `RunRequest.messages`)
and the engine keeps the conversation's KV cache between turns (`RunRequest.conversation`), so
a turn prefills only its new tokens. Each turn is followed by an autoregressive run of the
same history, with a cache of its own, so its speedup is measured against decoding that also
reuses its cache, right after the turn (the same conditions), with its 95 % interval over
both runs' steps (`app/reference.py`). `ChatController` owns its requests (a `RunOwner`): it
alone hears their events. It also answers the Chat view's buttons (clear, edit, regenerate,
save, load).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from PySide6.QtWidgets import QFileDialog

from app import history
from app.chat import CONVERSATION, Chat
from app.engine_api import Engine, RunRequest
from app.palette import REFERENCE_COLOR
from app.reference import REFERENCE, measured
from app.run_parts import PartsOwner, RunParts
from app.session import Session
from app.widgets.chat_view import ChatView
from app.worker import error_message
from specdec_core.decoding.events import RunSummary, Step
from specdec_core.errors import SpecdecError
from specdec_core.measurement.run_speedup import StepTime

REFERENCE_CONVERSATION = CONVERSATION + "-reference"
FILES = "Chat (*.jsonl *.json)"


class ChatController(PartsOwner):
    def __init__(
        self,
        session: Session,
        engine: Engine,
        parts: RunParts,
        view: ChatView,
        show_tab: Callable[[], None],
    ) -> None:
        """`show_tab()` brings the Chat tab to the front (a loaded chat is shown there)."""
        self.session, self.engine = session, engine
        super().__init__(parts)
        self.view, self.show_tab = view, show_tab
        self.chat = Chat()
        self._turn: RunRequest | None = None
        self._reference: RunRequest | None = None
        self._answer: RunSummary | None = None
        self._steps: list[StepTime] = []  # the turn's steps, timed
        self._reference_steps: list[StepTime] = []  # its reference's
        view.clear_requested.connect(lambda: session.ready() and self.clear())
        view.edit_requested.connect(self.edit_last_turn)
        view.regenerate_requested.connect(self.regenerate_last)
        view.save_requested.connect(self._save_dialog)
        view.load_requested.connect(self._load_dialog)

    # -- turns ----------------------------------------------------------------------------------
    def send_prompt(self) -> bool:
        """The prompt box as the next message; the box empties once the turn is under way."""
        if self.send(self.inputs.prompt_text(), self.inputs.method()):
            self.inputs.set_prompt("")
            return True
        return False

    def send(self, text: str, method: str) -> bool:
        """Ask `text` with `method`, then measure its autoregressive reference."""
        text = text.strip()
        if not text:
            self.session.report("the message is empty; type a message to send")
            return False
        base = self.inputs.request(method)
        turn = replace(
            base, prompt=text, messages=self.chat.messages(text), conversation=CONVERSATION
        )
        queue = [turn]
        self._reference = None
        if method != REFERENCE:
            self._reference = replace(
                turn,
                method=REFERENCE,
                config=turn.config.lossless(),
                conversation=REFERENCE_CONVERSATION,
            )
            queue.append(self._reference)
        if self.runs.running or self.runs.task_running:
            return False
        self._turn, self._answer = turn, None
        self._steps, self._reference_steps = [], []
        self.chat.ask(text)
        self.view.add_turn(text)
        self.plots.reset()
        return self.runs.run_queue(queue, self)

    def clear(self) -> None:
        self.chat = Chat()
        self.view.clear()
        try:
            for name in (CONVERSATION, REFERENCE_CONVERSATION):
                self.engine.forget(name)
        except Exception as error:  # the engine process ended: one line, Restart engine
            text, user = error_message(error, "chat")
            self.session.report(text, user=user)

    def edit_last(self) -> str:
        """Remove the last turn; its message goes back to the caller (the prompt box)."""
        text = self.chat.take_last()
        self.view.remove_last()
        return text

    def edit_last_turn(self) -> None:
        """Edit last turn: its message goes back to the prompt box."""
        if not self.session.ready():
            return
        try:
            self.inputs.set_prompt(self.edit_last())
        except SpecdecError as error:
            self.session.report(str(error))

    def regenerate_last(self) -> None:
        if self.session.ready():
            self.regenerate(self.inputs.method())

    def regenerate(self, method: str) -> bool:
        try:
            text = self.chat.take_last()
        except SpecdecError as error:
            self.session.report(str(error))
            return False
        self.view.remove_last()
        return self.send(text, method)

    # -- files ----------------------------------------------------------------------------------
    def save(self, path: Path) -> None:
        try:
            self.chat.save(path)
        except OSError as error:
            self.session.report(f"could not save the chat to {path} ({error}); choose another file")
            return
        self.session.report(f"saved the chat to {path}", error=False)

    def load(self, path: Path) -> None:
        if not self.session.ready():
            return
        try:
            chat = Chat.load(path)
        except (SpecdecError, OSError, ValueError) as error:
            self.session.report(str(error))
            return
        self.clear()
        self.chat = chat
        for turn in chat.turns:
            self.view.add_turn(turn.user).show_text(turn.reply)
        self.show_tab()

    def _save_dialog(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self.view, "Save chat", "chat.jsonl", FILES)
        if path:
            self.save(Path(path))

    def _load_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self.view, "Load chat", "", FILES)
        if path:
            self.load(Path(path))

    # -- the events of its runs -----------------------------------------------------------------
    def begun(self, request: RunRequest) -> None:
        if request is self._turn:
            method = request.method
            self.plots.begin_series(self.style.label(method), self.style.color(method))
        elif request is self._reference:
            name = self.style.label(request.method) + " (reference)"
            self.plots.begin_series(name, REFERENCE_COLOR)
            self.session.report("measuring the autoregressive reference for the speedup…", False)

    def stepped(self, request: RunRequest, step: Step) -> None:
        if request is self._turn:
            self._steps.append(StepTime.of(step))
            self.view.add_step(step)
            self.plots.add_step(self.style.label(request.method), step)
        elif request is self._reference:
            self._reference_steps.append(StepTime.of(step))
            self.plots.add_step(self.style.label(request.method) + " (reference)", step)

    def failed(self, request: RunRequest, message: str, user: bool) -> None:
        """A turn that got no answer gives its message back to the prompt box (when nothing
        was typed there meanwhile; otherwise it stays in the chat, for Regenerate)."""
        if request is self._turn and self.inputs.prompt_text().strip() == "":
            self.inputs.set_prompt(self.edit_last())

    def finished(self, request: RunRequest, summary: RunSummary) -> None:
        if request is self._turn:
            history.record(summary, request.prompt)
            self._answer = summary
            self.chat.answer(summary)
            self.view.finish(self.style.label(summary.method), summary, None)
        elif request is self._reference and self._answer is not None:
            found = None
            if summary.stop_reason != "stopped" and self._answer.stop_reason != "stopped":
                found = measured(self._answer, summary, self._steps, self._reference_steps)
            self.chat.turns[-1].speedup = found
            self.view.finish(self.style.label(self._answer.method), self._answer, found)
        self.plots.redraw()
