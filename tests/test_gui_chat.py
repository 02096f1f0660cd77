"""The chat a desktop user expects: replies as bubbles rendered as markdown once they end, with
Copy; the system prompt and the reply cap (in the settings) reach each turn; conversations
saved as they go, listed, reopened after a restart and continued; Stop keeps the partial
reply, marked stopped."""

from __future__ import annotations

import json
from dataclasses import replace

from PySide6.QtGui import QFont, QGuiApplication

from app.chat_store import ChatStore, chats_dir
from app.engine_api import ChatMessage
from app.widgets.chat_view import DEFAULT_REPLY_TOKENS, turn_summary
from specdec_core.decoding.events import Finished, Step, StepPhases, Token, TokenKind
from tests import gui_fake
from tests.gui_fake import FakeEngine
from tests.gui_window import make_window_fixture, wait_idle  # noqa: F401  (fixture)

LIST_REPLY = ["Speculative", " decoding", " is **fast**", ":\n\n", "- one draft\n", "- one check\n"]


def _chat(make_window, engine=None, **settings):
    window = make_window(engine, **settings)
    window.show_chat()
    return window


def _say(qtbot, window, text: str) -> None:
    window.prompt.set_text(text)
    window.generate()
    wait_idle(qtbot, window)


class MarkdownEngine(FakeEngine):
    """Every reply is `reply`, a token a step, its summary's text theirs (as the engine's
    detokenizer gives it)."""

    def __init__(self, reply: list[str]) -> None:
        super().__init__(steps=len(reply))
        self.reply = reply

    def events(self, request, stop, progress):
        for event in super().events(request, stop, progress):
            if isinstance(event, Finished):
                text = "".join(self.reply[: event.summary.new_tokens])
                event = Finished(replace(event.summary, text=text))
            yield event


def _markdown_reply(monkeypatch, reply: list[str] = LIST_REPLY) -> FakeEngine:
    def step(index: int, method: str) -> Step:
        token = Token(200 + index, reply[index], TokenKind.TARGET, index, 0.5)
        return Step(index, (token,), 0, 0, phases=StepPhases(draft=0.001, target=0.01))

    monkeypatch.setattr(gui_fake, "fake_step", step)
    return MarkdownEngine(reply)


def test_a_conversation_is_saved_reopened_after_a_restart_and_continued(make_window, qtbot):
    window = _chat(make_window)
    window.chat_view.system.setText("Answer briefly.")
    _say(qtbot, window, "first question")
    reply = window.chat.chat.turns[0].reply
    [key] = window.chat_view.listed()
    saved = json.loads(ChatStore.default().path(key).read_text())
    assert saved["turns"] == ["first question"] and saved["replies"] == [reply]
    assert saved["system"] == "Answer briefly." and saved["numbers"][0]["speedup"] is not None
    window.close()

    again = _chat(make_window, settings_file=window.settings_file)
    assert again.chat_view.turns == [] and again.chat_view.listed() == [key]
    assert again.chat_view.system.text() == "Answer briefly."  # from the settings
    again.chat_view.system.setText("")
    again.chat_view.conversations.setCurrentIndex(1)  # after "New conversation"
    again.chat_view.conversations.activated.emit(1)
    [shown] = again.chat_view.turns
    assert shown.user.text() == "first question" and shown.text == reply
    assert again.chat_view.system.text() == "Answer briefly."  # the conversation's own
    assert shown.summary.text().startswith("saved reply · Classic draft: τ ")
    assert "vs autoregressive (95% interval " in shown.summary.text()

    _say(qtbot, again, "second question")  # it continues
    asked = again.engine.requests[0]
    assert asked.messages == (
        ChatMessage("system", "Answer briefly."),
        ChatMessage("user", "first question"),
        ChatMessage("assistant", reply),
        ChatMessage("user", "second question"),
    )
    assert again.chat_view.listed() == [key]  # the same conversation, not a new one
    assert again.chat_view.conversations.currentText().startswith("first question · 2 turns")
    saved = json.loads(ChatStore.default().path(key).read_text())
    assert saved["turns"] == ["first question", "second question"] and all(saved["replies"])


def test_new_starts_a_conversation_and_delete_removes_one(make_window, qtbot):
    window = _chat(make_window)
    _say(qtbot, window, "about caches")
    window.chat_view.buttons["clear"].click()  # New
    assert window.chat_view.turns == [] and window.chat.key == ""
    _say(qtbot, window, "about trees")
    first, second = sorted(ChatStore.default().listing(), key=lambda s: s.updated)
    assert (first.title, second.title) == ("about caches", "about trees")
    assert window.chat_view.conversations.currentText().startswith("about trees · 1 turn · ")
    window.chat.delete(window.chat.key)  # the one shown: a new conversation
    assert window.chat_view.turns == [] and window.chat_view.listed() == [first.key]
    assert sorted(p.stem for p in chats_dir().glob("*.json")) == [first.key]


def test_the_system_prompt_and_the_reply_cap_reach_each_turn_and_persist(make_window, qtbot):
    window = _chat(make_window)
    view = window.chat_view
    assert view.max_tokens.value() == DEFAULT_REPLY_TOKENS  # not Generate's 64
    _say(qtbot, window, "hello")
    turn, reference = window.engine.requests
    assert turn.config.max_new_tokens == reference.config.max_new_tokens == DEFAULT_REPLY_TOKENS
    assert window.decoding.max_new_tokens.value() == 64  # Generate's own stays
    assert turn.messages[0].role == "user"  # no system prompt: no system message
    view.system.setText("You are terse.")
    view.max_tokens.setValue(2048)
    _say(qtbot, window, "again")
    asked = window.engine.requests[2]
    assert asked.messages[0] == ChatMessage("system", "You are terse.")
    assert asked.config.max_new_tokens == 2048
    window.close()
    again = make_window(settings_file=window.settings_file)
    assert again.chat_view.system.text() == "You are terse."
    assert again.chat_view.max_tokens.value() == 2048


def test_stop_keeps_the_partial_reply_marked_stopped(make_window, qtbot):
    engine = FakeEngine(steps=100_000, delay=0.02)
    window = _chat(make_window, engine)
    window.prompt.set_text("tell me everything")
    window.generate()
    qtbot.waitUntil(lambda: engine.produced >= 3, timeout=5000)
    window.stop()
    wait_idle(qtbot, window)
    turn = window.chat.chat.turns[0]
    assert turn.stopped and turn.reply == engine.summaries[0].text and turn.reply
    shown = window.chat_view.turns[0]
    assert f"stopped after {engine.summaries[0].new_tokens} tokens" in shown.summary.text()
    assert shown.text == turn.reply and shown.copy_button.isEnabled()
    assert [r.method for r in engine.requests] == ["classic"]  # no reference for a cut reply
    saved = json.loads(ChatStore.default().path(window.chat.key).read_text())
    assert saved["stopped"] == [True] and saved["replies"] == [turn.reply]

    engine.steps = 3
    _say(qtbot, window, "go on")  # what was said is part of the history
    assert engine.requests[1].messages[1] == ChatMessage("assistant", turn.reply)


def test_an_ended_reply_is_rendered_as_markdown_and_its_tokens_stay(
    make_window, qtbot, monkeypatch
):
    window = _chat(make_window, _markdown_reply(monkeypatch))
    _say(qtbot, window, "what is it?")
    turn = window.chat_view.turns[0]
    assert turn.markdown.isVisible() and not turn.reply.isVisible()
    document = turn.markdown.document()
    assert document.toPlainText() == "Speculative decoding is fast:\none draft\none check"
    fragments = [part.fragment() for part in document.findBlockByNumber(0)]
    weights = {f.text(): f.charFormat().fontWeight() for f in fragments}
    assert weights["fast"] == QFont.Weight.Bold and weights["Speculative decoding is "] < 700
    items = [document.findBlockByNumber(n) for n in (1, 2)]
    assert all(block.textList() is not None for block in items)  # a bulleted list
    assert len(turn.reply.tokens) == len(LIST_REPLY)  # the coloured tokens are kept
    turn.tokens_button.click()
    assert turn.reply.isVisible() and not turn.markdown.isVisible()
    turn.tokens_button.click()
    assert turn.markdown.isVisible()


def test_a_bubble_is_as_tall_as_its_text(make_window, qtbot, monkeypatch):
    window = _chat(make_window, _markdown_reply(monkeypatch))
    _say(qtbot, window, "short")
    turn = window.chat_view.turns[0]
    lines = turn.markdown.fontMetrics().lineSpacing()
    assert turn.markdown.height() < 6 * lines  # three lines of text, not a tall empty box
    assert turn.markdown.height() >= turn.markdown.document().size().height()


def test_copy_puts_the_reply_text_on_the_clipboard(make_window, qtbot, monkeypatch):
    window = _chat(make_window, _markdown_reply(monkeypatch))
    _say(qtbot, window, "what is it?")
    QGuiApplication.clipboard().setText("something else")
    window.chat_view.turns[0].copy_button.click()
    assert QGuiApplication.clipboard().text() == "".join(LIST_REPLY)


def test_a_long_code_line_wraps_inside_its_bubble(make_window, qtbot, monkeypatch):
    code = "```python\n" + "numbers = [x * x for x in range(100)]  # " + "word " * 60 + "\n```\n"
    window = _chat(make_window, _markdown_reply(monkeypatch, ["Like this:\n\n", code]))
    _say(qtbot, window, "show me code")
    markdown = window.chat_view.turns[0].markdown
    document = markdown.document()
    blocks = [document.findBlockByNumber(n) for n in range(document.blockCount())]
    assert any(block.text().startswith("numbers = ") for block in blocks)
    assert not any(block.blockFormat().nonBreakableLines() for block in blocks)
    assert document.idealWidth() <= markdown.viewport().width()  # nothing cut on the right


def test_the_line_under_a_reply_says_why_it_ended_where_it_was_not_its_end_of_turn():
    from specdec_core.decoding.events import RunSummary

    def ended(reason: str) -> str:
        summary = RunSummary("ar", "lossless", False, 9, 12, (), "", 12, 1.0, 0.1, reason)
        return turn_summary("Autoregressive", summary, None)

    assert "cut at the reply cap (12 tokens; raise it above)" in ended("max_tokens")
    assert "stopped after 12 tokens" in ended("stopped")
    assert "context is full" in ended("context")
    assert "cut" not in ended("eos") and "stopped" not in ended("eos")
