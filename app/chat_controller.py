"""Chat mode: each Generate sends the prompt box as the next user message of a conversation.

The chat template is applied over the whole history (the engine renders `RunRequest.messages`)
and the engine keeps the conversation's KV cache between turns (`RunRequest.conversation`), so
a turn prefills only its new tokens. Each turn is followed by an autoregressive run of the
same history, with a cache of its own, so its speedup is measured against decoding that also
reuses its cache. The controller handles only its own requests among the `RunController`'s
events; the window ignores them (`is_chat`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QObject, Slot

from app.chat import CONVERSATION, Chat
from app.engine_api import Engine, RunRequest
from app.palette import REFERENCE_COLOR
from app.reference import REFERENCE, speedup
from app.run_controller import RunController
from app.session import Session
from app.widgets.chat_view import ChatView
from app.widgets.plots_panel import PlotsPanel
from specdec_core.errors import SpecdecError
from specdec_core.events import RunSummary, Step

REFERENCE_CONVERSATION = CONVERSATION + "-reference"


def is_chat(request: RunRequest | None) -> bool:
    return request is not None and bool(request.messages)


class ChatController(QObject):
    def __init__(
        self,
        session: Session,
        engine: Engine,
        runs: RunController,
        view: ChatView,
        plots: PlotsPanel,
        request: Callable[[str], RunRequest],
        label: Callable[[str], tuple[str, str]],
        parent: QObject | None = None,
    ) -> None:
        """`request(method)`: a run request of the current settings; `label(method)`: its
        label and colour."""
        super().__init__(parent)
        self.session, self.engine, self.runs, self.view, self.plots = (
            session,
            engine,
            runs,
            view,
            plots,
        )
        self.make_request, self.label = request, label
        self.chat = Chat()
        self._turn: RunRequest | None = None
        self._reference: RunRequest | None = None
        self._answer: RunSummary | None = None
        runs.run_begun.connect(self._on_begun)
        runs.stepped.connect(self._on_step)
        runs.finished.connect(self._on_finished)

    # -- turns ----------------------------------------------------------------------------------
    def send(self, text: str, method: str) -> bool:
        """Ask `text` with `method`, then measure its autoregressive reference."""
        text = text.strip()
        if not text:
            self.session.report("the message is empty; type a message to send")
            return False
        base = self.make_request(method)
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
        self.chat.ask(text)
        self.view.add_turn(text)
        self.plots.reset()
        return self.runs.run_queue(queue)

    def clear(self) -> None:
        self.chat = Chat()
        self.view.clear()
        for name in (CONVERSATION, REFERENCE_CONVERSATION):
            self.engine.forget(name)

    def edit_last(self) -> str:
        """Remove the last turn; its message goes back to the caller (the prompt box)."""
        text = self.chat.take_last()
        self.view.remove_last()
        return text

    def regenerate(self, method: str) -> bool:
        try:
            text = self.chat.take_last()
        except SpecdecError as error:
            self.session.report(str(error))
            return False
        self.view.remove_last()
        return self.send(text, method)

    def save(self, path: Path) -> None:
        self.chat.save(path)
        self.session.report(f"saved the chat to {path}", error=False)

    def load(self, path: Path) -> None:
        chat = Chat.load(path)
        self.clear()
        self.chat = chat
        for turn in chat.turns:
            self.view.add_turn(turn.user).show_text(turn.reply)

    # -- events ---------------------------------------------------------------------------------
    @Slot(object)
    def _on_begun(self, request: RunRequest) -> None:
        if request is self._turn:
            self.plots.begin_series(*self.label(request.method))
        elif request is self._reference:
            name = self.label(request.method)[0] + " (reference)"
            self.plots.begin_series(name, REFERENCE_COLOR)
            self.session.report("measuring the autoregressive reference for the speedup…", False)

    @Slot(object)
    def _on_step(self, step: Step) -> None:
        request = self.runs.current
        if request is self._turn:
            self.view.add_step(step)
            self.plots.add_step(self.label(request.method)[0], step)
        elif request is self._reference:
            self.plots.add_step(self.label(request.method)[0] + " (reference)", step)

    @Slot(object)
    def _on_finished(self, summary: RunSummary) -> None:
        request = self.runs.current
        if request is self._turn:
            self._answer = summary
            self.chat.answer(summary)
            self.view.finish(self.label(summary.method)[0], summary, None)
        elif request is self._reference and self._answer is not None:
            ratio = speedup(self._answer, summary) if summary.stop_reason != "stopped" else None
            self.chat.turns[-1].speedup = ratio
            self.view.finish(self.label(self._answer.method)[0], self._answer, ratio)
        self.plots.redraw()
