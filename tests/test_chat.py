"""Chat mode: the template over the whole conversation, the first turn's cache reused by the
second, identical to a fresh run over the history at T = 0, and the window's chat."""

from __future__ import annotations

import json

import pytest

from app.chat import CONVERSATION, Chat
from app.engine import SpecdecEngine
from app.engine_api import ChatMessage, RunRequest
from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.detokenize import IncrementalDetokenizer
from specdec_core.decoding.events import Finished, Step, StepPhases, Token, TokenKind
from tests import gui_fake
from tests.gui_window import make_window_fixture, wait_idle  # noqa: F401  (fixture)
from tests.tiny import CHAT_TEMPLATE, tiny_loaded, tiny_tokenizer

CONFIG = DecodeConfig(max_new_tokens=10, k=3)


@pytest.fixture
def chat_target():
    target = tiny_loaded(seed=1)
    target.tokenizer.chat_template = CHAT_TEMPLATE
    return target


def _finish(engine, request) -> object:
    events = engine.events(request, stop=_Never(), progress=lambda *_: None)
    return next(e.summary for e in events if isinstance(e, Finished))


class _Never:
    def is_set(self) -> bool:
        return False


@pytest.mark.parametrize("method", ["ar", "ngram"])
def test_a_two_turn_chat_reuses_the_first_turns_cache_and_equals_a_fresh_run(chat_target, method):
    engine = SpecdecEngine(chat_target)
    first_user = ChatMessage("user", "w1 w2 w3 w4")
    first = _finish(engine, RunRequest(method, "w1 w2 w3 w4", CONFIG, messages=(first_user,),
                                       conversation=CONVERSATION))  # fmt: skip
    history = (first_user, ChatMessage("assistant", first.text), ChatMessage("user", "w5 w6"))
    second = _finish(engine, RunRequest(method, "w5 w6", CONFIG, messages=history,
                                        conversation=CONVERSATION))  # fmt: skip
    fresh = _finish(SpecdecEngine(chat_target), RunRequest(method, "", CONFIG, messages=history))
    assert second.token_ids == fresh.token_ids
    assert first.reused_tokens == 0 and fresh.reused_tokens == 0
    # the second turn prefills only what the first turn did not leave in the cache
    assert second.reused_tokens >= first.prompt_tokens + first.new_tokens - 1
    assert second.prompt_tokens - second.reused_tokens <= 7  # "</s> <s> w5 w6 </s> <s>"
    rendered = chat_target.tokenizer.apply_chat_template(
        [{"role": m.role, "content": m.content} for m in history],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert second.prompt_tokens == len(chat_target.tokenizer(rendered)["input_ids"])


def test_a_saved_chat_is_a_prompt_file_with_its_turns(tmp_path):
    chat = Chat()
    chat.ask("Hello there")
    chat.turns[-1].reply = "Hi!"
    chat.ask("Tell me more")
    path = tmp_path / "chat.jsonl"
    chat.save(path)
    record = json.loads(path.read_text())
    assert record["turns"] == ["Hello there", "Tell me more"] and record["replies"][0] == "Hi!"
    again = Chat.load(path)
    assert [t.user for t in again.turns] == ["Hello there", "Tell me more"]
    assert again.messages("next")[1] == ChatMessage("assistant", "Hi!")


def test_the_window_chats_in_turns_with_speedup_and_cache_per_turn(make_window, qtbot, tmp_path):
    window = make_window()
    window.tabs.setCurrentWidget(window.chat_view)
    for text in ("first question", "second question"):
        window.prompt.set_text(text)
        window.generate()
        wait_idle(qtbot, window)
        assert window.prompt.text() == ""
    requests = window.engine.requests
    assert [r.method for r in requests] == ["classic", "ar", "classic", "ar"]
    second = requests[2]
    assert [m.role for m in second.messages] == ["user", "assistant", "user"]
    assert second.messages[0].content == "first question" and second.conversation == CONVERSATION
    assert requests[3].conversation != CONVERSATION  # the reference keeps its own cache
    turns = window.chat_view.turns
    assert len(turns) == 2 and turns[1].reply.tokens
    assert "vs autoregressive (95% interval " in turns[1].summary.text()
    assert "from the kept conversation" in turns[1].summary.text()
    speedup = window.chat.chat.turns[1].speedup
    answer, reference = window.engine.summaries[2:4]
    assert speedup.ratio == answer.tokens_per_second / reference.tokens_per_second
    low, high = speedup.interval
    assert low < speedup.ratio < high
    assert f"(95% interval {speedup.interval_text()})" in turns[1].summary.text()

    window.save_chat(tmp_path / "chat.jsonl")
    window.regenerate()
    wait_idle(qtbot, window)
    assert (
        len(window.chat_view.turns) == 2 and window.engine.requests[-2].prompt == "second question"
    )
    window.edit_last_turn()
    assert window.prompt.text() == "second question" and len(window.chat_view.turns) == 1
    window.chat_view.clear_requested.emit()
    assert window.chat_view.turns == [] and CONVERSATION in window.engine.forgotten
    window.load_chat(tmp_path / "chat.jsonl")
    assert [t.user.text() for t in window.chat_view.turns] == ["first question", "second question"]


def test_the_settings_remember_chat_mode(make_window, qtbot, tmp_path):
    window = make_window()
    window.tabs.setCurrentWidget(window.chat_view)
    window.close()
    again = make_window(settings_file=window.settings_file)
    assert again.in_chat()


def test_a_saved_chat_replays_turn_by_turn_in_bench(chat_target, tmp_path, monkeypatch, capsys):
    from specdec_core.cli import main
    from specdec_core.models import loading as models

    chat = Chat()
    chat.ask("w1 w2 w3")
    chat.ask("w4 w5")
    path = tmp_path / "chat.jsonl"
    chat.save(path)
    monkeypatch.setattr(models, "load_model", lambda *args, **kwargs: chat_target)
    out = tmp_path / "bench.json"
    argv = ["bench", "--prompts", str(path), "--multi-turn", "--methods", "ar,ngram"]
    assert main([*argv, "--max-new-tokens", "8", "--json-out", str(out)]) == 0
    rows = json.loads(out.read_text())["per_prompt"]
    assert [(r["method"], r["turn"]) for r in rows] == [
        ("ar", 0), ("ngram", 0), ("ar", 1), ("ngram", 1)
    ]  # fmt: skip
    assert all(r["identical_to_ar"] for r in rows)
    assert all(r["reused_tokens"] > 0 for r in rows if r["turn"] == 1)
    assert all(r["reused_tokens"] == 0 for r in rows if r["turn"] == 0)


def test_a_reply_ending_in_the_end_of_turn_token_shows_without_it(make_window, qtbot, monkeypatch):
    """Each token's text as the engine's detokenizer gives it: "w5 w6", then the tokenizer's
    special end token (`</s>` here, `<|im_end|>` for SmolLM2)."""
    tokenizer = tiny_tokenizer()
    ids = tokenizer.convert_tokens_to_ids(["w5", "w6", "</s>"])
    detoks: list[IncrementalDetokenizer] = []

    def step(index: int, method: str) -> Step:
        if index == 0:  # a new run: the reply, then its autoregressive reference
            detoks.append(IncrementalDetokenizer(tokenizer, [tokenizer.bos_token_id]))
        token = Token(ids[index], detoks[-1].push(ids[index]), TokenKind.TARGET, index, 0.5)
        return Step(index, (token,), 0, 0, phases=StepPhases(draft=0.001, target=0.01))

    monkeypatch.setattr(gui_fake, "fake_step", step)
    window = make_window(gui_fake.FakeEngine(steps=len(ids)))
    window.tabs.setCurrentWidget(window.chat_view)
    window.prompt.set_text("hello")
    window.generate()
    wait_idle(qtbot, window)
    reply = window.chat_view.turns[-1].reply
    assert [t.id for t in reply.tokens] == ids  # the end token ran, and shows nothing
    assert reply.toPlainText().strip() == "w5 w6"


# a template that closes the assistant's turns with its own token (`WORD`, not the eos) and
# the user's with `</s>`: the prompt of a first turn is the same whichever word closes a reply
TURN_END_TEMPLATE = (
    "{% for m in messages %}<s> {{ m['content'] }} "
    "{% if m['role'] == 'assistant' %}WORD{% else %}</s>{% endif %} {% endfor %}"
    "{% if add_generation_prompt %}<s> {% endif %}"
)


def _turn_ending_with(target, word: str, special: bool):
    target.tokenizer.chat_template = TURN_END_TEMPLATE.replace("WORD", word)
    if special:
        target.tokenizer.add_special_tokens({"additional_special_tokens": [word]})
    return target


@pytest.mark.parametrize("method", ["ar", "ngram"])
def test_a_reply_ends_at_the_templates_end_of_turn_token_the_config_does_not_name(method):
    config = DecodeConfig(max_new_tokens=20, k=3)
    ask = (ChatMessage("user", "w1 w2 w3 w4"),)
    plain = _turn_ending_with(tiny_loaded(seed=1), "w9", special=False)  # not a special token
    whole = _finish(SpecdecEngine(plain), RunRequest(method, "", config, messages=ask))
    assert whole.stop_reason == "max_tokens" and len(whole.token_ids) == 20
    ids = whole.token_ids
    # a token the reply says after its start, for the first time there
    index = next(i for i in range(2, len(ids)) if ids[i] not in ids[:i] and ids[i] != 2)
    word = plain.tokenizer.convert_ids_to_tokens(ids[index])
    target = _turn_ending_with(tiny_loaded(seed=1), word, special=True)
    assert target.model.generation_config.eos_token_id == 2  # the config names only </s>
    assert ids[index] in target.eos_ids
    ended = _finish(SpecdecEngine(target), RunRequest(method, "", config, messages=ask))
    assert ended.stop_reason == "eos"
    assert ended.token_ids == ids[: index + 1]  # the same reply, up to its end of turn


def test_the_end_of_turn_token_is_read_from_the_template():
    from specdec_core.models.end_of_turn import end_of_turn_id

    assert end_of_turn_id(tiny_tokenizer(chat=True)) == 2  # "</s>" closes each turn
    assert end_of_turn_id(tiny_tokenizer()) is None  # no template
    newline = tiny_tokenizer()
    newline.chat_template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
    assert end_of_turn_id(newline) is None  # a turn closed by plain text names no token


def test_the_system_prompt_goes_into_the_template_before_the_conversation(chat_target):
    system = ChatMessage("system", "w7 w8 w9")
    asked = (system, ChatMessage("user", "w1 w2 w3"))
    summary = _finish(
        SpecdecEngine(chat_target), RunRequest("ar", "w1 w2 w3", CONFIG, messages=asked)
    )
    rendered = chat_target.tokenizer.apply_chat_template(
        [{"role": m.role, "content": m.content} for m in asked],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert rendered.startswith("<s> w7 w8 w9 </s> <s> w1 w2 w3")
    assert summary.prompt_tokens == len(chat_target.tokenizer(rendered)["input_ids"])
    without = _finish(SpecdecEngine(chat_target), RunRequest("ar", "", CONFIG, messages=asked[1:]))
    assert summary.prompt_tokens == without.prompt_tokens + 5  # "<s> w7 w8 w9 </s>"


def test_a_template_that_takes_no_system_message_says_what_to_do(chat_target):
    from specdec_core.errors import SpecdecError

    chat_target.tokenizer.chat_template = (
        "{% for m in messages %}{% if m['role'] == 'system' %}"
        "{{ raise_exception('System role not supported') }}{% endif %}"
        "<s> {{ m['content'] }} </s> {% endfor %}<s> "
    )
    asked = (ChatMessage("system", "w7"), ChatMessage("user", "w1 w2"))
    with pytest.raises(SpecdecError, match="clear the system prompt") as error:
        _finish(SpecdecEngine(chat_target), RunRequest("ar", "w1 w2", CONFIG, messages=asked))
    assert "\n" not in str(error.value) and "System role not supported" in str(error.value)


def test_a_chat_record_keeps_its_system_prompt_stopped_replies_and_numbers(tmp_path):
    from app.chat import ReplyNumbers

    chat = Chat(system="Answer briefly.")
    chat.ask("Hello there")
    chat.turns[-1].reply = "Hi! How"
    chat.turns[-1].stopped = True
    chat.turns[-1].numbers = ReplyNumbers("EAGLE-2", 2.5, 31.0, 3, 1.6, (1.4, 1.8))
    path = tmp_path / "chat.jsonl"
    chat.save(path)
    again = Chat.load(path)
    assert again.system == "Answer briefly." and again.turns[0].stopped
    assert again.turns[0].numbers == chat.turns[0].numbers
    assert again.messages("next") == (
        ChatMessage("system", "Answer briefly."),
        ChatMessage("user", "Hello there"),
        ChatMessage("assistant", "Hi! How"),  # a stopped reply is part of the history
        ChatMessage("user", "next"),
    )
