"""Chat mode: each Generate sends the prompt box as the next user message of a conversation.

The chat template is applied over the whole history (the engine renders `RunRequest.messages`)
and the engine keeps the conversation's KV cache between turns (`RunRequest.conversation`), so
a turn prefills only its new tokens. A turn's speedup is against an autoregressive run of the
same history, with a cache of its own (decoding that also reuses its cache), with its 95 %
interval over both runs' steps (`app/reference.py`), by the rule Generate follows
(app/single_run_controller.py): the reply's line is shown when it ends and the window is ready
at once; the reference is reused where the same history and settings were measured before on
this machine (its first steps re-timed in the background), else measured in the background
after the reply and filled in when it ends; the next action cancels it; Run ▸ Measure the
speedup turns it off. `ChatController` owns its requests (a `RunOwner`): it
alone hears their events.

A turn is asked with the Chat view's system prompt and ends at the model's end of turn (the
engine's end-of-answer ids include the one its chat template closes a turn with) or at the
view's reply cap, whatever the Decoding panel's Max new tokens says (that is Generate's and
Compare's). Stop keeps what was said so far, marked stopped. Each conversation is saved as it
goes (app/chat_store.py: after each message, reply and speedup), listed in the view newest
first, and opened again from there to continue; it also answers the view's other buttons
(new, delete, edit, regenerate, save, load).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QMessageBox

from app import history
from app.chat import CONVERSATION, Chat, ReplyNumbers
from app.chat_store import ChatStore
from app.engine_api import Engine, RunRequest
from app.palette import REFERENCE_COLOR
from app.reference import (
    REFERENCE,
    Reference,
    References,
    RunSpeedup,
    check_request,
    measured,
    reference_request,
)
from app.reference_store import KeptReference
from app.run_parts import PartsOwner, RunParts
from app.session import Session
from app.widgets.chat_view import ChatView, saved_summary
from app.worker import error_message
from specdec_core.decoding.events import RunSummary, Step
from specdec_core.errors import SpecdecError
from specdec_core.measurement.run_speedup import StepTime

REFERENCE_CONVERSATION = CONVERSATION + "-reference"
MEASURING_NOTE = "measuring the speedup…"
CANCELLED_NOTE = "no speedup: its reference was cancelled"
OFF_NOTE = "speedup off"
FILES = "Chat (*.jsonl *.json)"


class ChatController(PartsOwner):
    def __init__(
        self,
        session: Session,
        engine: Engine,
        parts: RunParts,
        view: ChatView,
        show_tab: Callable[[], None],
        references: References,
        store: ChatStore,
    ) -> None:
        """`show_tab()` brings the Chat tab to the front (a loaded chat is shown there);
        `store`: where conversations are saved."""
        self.session, self.engine = session, engine
        super().__init__(parts)
        self.view, self.show_tab = view, show_tab
        self.references = references
        self.store = store
        self.chat = Chat()
        self.key = ""  # the conversation's name in the store ("": not saved yet)
        self._turn: RunRequest | None = None
        self._reference: RunRequest | None = None
        self._kept: KeptReference | None = None  # a kept reference being re-timed
        self._answer: RunSummary | None = None
        self._steps: list[StepTime] = []  # the turn's steps, timed
        self._reference_steps: list[StepTime] = []  # its reference's
        view.clear_requested.connect(lambda: session.ready() and self.clear())
        view.edit_requested.connect(self.edit_last_turn)
        view.regenerate_requested.connect(self.regenerate_last)
        view.save_requested.connect(self._save_dialog)
        view.load_requested.connect(self._load_dialog)
        view.open_requested.connect(self.open)
        view.delete_requested.connect(self._delete_dialog)
        self._list()

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
        if self.runs.running or self.runs.task_running:
            return False
        base = self.inputs.request(method)
        self.chat.system = self.view.system.text()
        config = replace(base.config, max_new_tokens=self.view.max_tokens.value())
        turn = replace(
            base,
            prompt=text,
            config=config,
            messages=self.chat.messages(text),
            conversation=CONVERSATION,
        )
        if self._reference is not None:  # the last turn's reference: this turn cancels it
            self._reference_finished(None)
        self._turn, self._answer, self._reference, self._kept = turn, None, None, None
        self._steps, self._reference_steps = [], []
        self.chat.ask(text)
        self.view.add_turn(text)
        self._save()
        self.plots.reset()
        return self.runs.run_queue([turn], self)

    def clear(self) -> None:
        """A new conversation; the one shown stays saved."""
        self.runs.stop_reference()  # the engine forgets the caches once it has ended
        self.chat, self.key = Chat(system=self.view.system.text()), ""
        self.view.clear()
        self._list()
        self._forget()

    def _forget(self) -> None:
        """The engine drops the conversation's caches (a later turn prefills what it needs)."""
        try:
            for name in (CONVERSATION, REFERENCE_CONVERSATION):
                self.engine.forget(name)
        except Exception as error:  # the engine process ended: one line, Restart engine
            text, user = error_message(error, "chat")
            self.session.report(text, user=user)

    def edit_last(self) -> str:
        """Remove the last turn; its message goes back to the caller (the prompt box)."""
        self._drop_reference()
        text = self.chat.take_last()
        self.view.remove_last()
        self._save()
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
        self._drop_reference()
        try:
            text = self.chat.take_last()
        except SpecdecError as error:
            self.session.report(str(error))
            return False
        self.view.remove_last()
        return self.send(text, method)

    def _drop_reference(self) -> None:
        """The last turn goes: its reference, if one still runs, is no longer wanted."""
        self._reference = None
        self.runs.stop_reference()

    # -- the saved conversations ------------------------------------------------------------
    def _save(self) -> None:
        """The conversation to the store (a new one gets its name at its first message; one
        left without turns is removed)."""
        try:
            if self.chat.turns:
                self.key = self.key or self.store.new_key()
                self.store.save(self.key, self.chat)
            elif self.key:
                self.store.delete(self.key)
                self.key = ""
        except OSError as error:
            self.session.report(
                f"could not save the conversation in {self.store.folder} ({error}); "
                "free some space or check the folder's permissions"
            )
            return
        self._list()  # its turns and time in the list

    def _list(self) -> None:
        self.view.set_conversations(self.store.listing(), self.key)

    def open(self, key: str) -> None:
        """Show a saved conversation; the next message continues it (with its system
        prompt)."""
        if not self.session.ready():
            self._list()
            return
        try:
            chat = self.store.load(key)
        except SpecdecError as error:
            self.session.report(str(error))
            self._list()
            return
        self._show(chat, key)

    def _show(self, chat: Chat, key: str) -> None:
        self._drop_reference()
        self._turn, self._answer = None, None
        self.chat, self.key = chat, key
        self.view.clear()
        self.view.system.setText(chat.system)
        for turn in chat.turns:
            self.view.add_turn(turn.user).show_text(
                turn.reply, saved_summary(turn.numbers, turn.stopped)
            )
        self._forget()
        self._list()
        self.show_tab()

    def delete(self, key: str) -> None:
        """Delete a saved conversation; deleting the one shown starts a new one."""
        if not self.session.ready():
            return
        try:
            self.store.delete(key)
        except OSError as error:
            self.session.report(f"could not delete the conversation ({error}); try again")
            return
        if key == self.key:
            self.key = ""
            self.clear()
        else:
            self._list()

    def _delete_dialog(self, key: str) -> None:
        answer = QMessageBox.question(
            self.view, "Delete conversation", f"Delete “{self.chat.title}”? This cannot be undone."
        )
        if answer == QMessageBox.StandardButton.Yes:
            self.delete(key)

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
        self._show(chat, "")
        self._save()  # a new conversation in the list

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

    def stepped(self, request: RunRequest, step: Step) -> None:
        if request is self._turn:
            self._steps.append(StepTime.of(step))
            self.view.add_step(step)
            self.plots.add_step(self.style.label(request.method), step)
        elif request is self._reference:
            self._reference_steps.append(StepTime.of(step))
            name = self.style.label(request.method) + " (reference)"
            if name in self.plots.series:  # a Generate or Compare may have reset the plots
                self.plots.add_step(name, step)

    def failed(self, request: RunRequest, message: str, user: bool) -> None:
        """A turn that got no answer gives its message back to the prompt box (when nothing
        was typed there meanwhile; otherwise it stays in the chat, for Regenerate)."""
        if request is self._turn and self.inputs.prompt_text().strip() == "":
            self.inputs.set_prompt(self.edit_last())
        elif request is self._reference:
            self._reference_finished(None)
            self._reference = None

    def finished(self, request: RunRequest, summary: RunSummary) -> None:
        if request is self._turn:
            history.record(summary, request.prompt)
            self._answer = summary
            self.chat.answer(summary)
            self._answered(request, summary)
        elif request is self._reference and self._answer is not None:
            self._reference_finished(summary)
            self._reference = None
        self.plots.redraw()

    def _answered(self, turn: RunRequest, summary: RunSummary) -> None:
        """The reply's line at once; its speedup as the reference allows."""
        reference = replace(turn, conversation=REFERENCE_CONVERSATION)
        if summary.stop_reason == "stopped":  # what was said is kept, marked stopped
            self._finish(None)
        elif turn.method == REFERENCE:  # its own reference: kept for the turns to come
            self.references.keep(turn, summary, self._steps)
            self._finish(None)
        elif not self.references.on():
            self._finish(None, OFF_NOTE)
        elif (kept := self.references.kept(turn)) is not None:
            self._kept, self._reference = kept, check_request(reference, kept)
            self._finish(measured(summary, Reference.kept(kept, checking=True), self._steps))
            self.runs.run_background(self._reference, self)
        else:
            self._reference = reference_request(reference)
            self._finish(None, MEASURING_NOTE)
            self.runs.run_background(self._reference, self)

    def _reference_finished(self, summary: RunSummary | None) -> None:
        """The reference ended (`summary`), or was cancelled before it could (None)."""
        if self._answer is None or self._turn is None:
            return
        done = summary is not None and summary.stop_reason != "stopped"
        if self._kept is not None:
            reference = Reference.kept(self._kept, self._reference_steps if done else None)
        elif not done:
            self._finish(None, CANCELLED_NOTE)
            return
        else:
            assert summary is not None
            reference = Reference.measured_now(summary, self._reference_steps)
        found = measured(self._answer, reference, self._steps)
        disturbed = found is not None and found.disturbed  # Regenerate then measures both
        if done and reference.reused and disturbed:
            self.references.forget(self._turn)
        elif summary is not None and done and not reference.reused and not disturbed:
            self.references.keep(self._turn, summary, self._reference_steps)
        self._finish(found)

    def _finish(self, found: RunSpeedup | None, note: str = "") -> None:
        """The turn's line: its speedup, or a note on why there is none yet."""
        assert self._answer is not None
        label = self.style.label(self._answer.method)
        if self.chat.turns:
            last = self.chat.turns[-1]
            last.speedup, last.numbers = found, ReplyNumbers.of(label, self._answer, found)
        self.view.finish(label, self._answer, found, note)
        self._save()
