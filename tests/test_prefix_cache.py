"""A conversation's cache kept between turns: the second turn prefills only its new tokens and
decodes exactly as a fresh run over the whole history (T = 0, float32)."""

from __future__ import annotations

import pytest

from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.prefix_cache import PrefixCache
from specdec_core.loop.decode import generate
from specdec_core.run.methods import build_drafter
from specdec_core.run.runner import run
from tests.eagle_tiny import tiny_head
from tests.tiny import prompt

CONFIG = DecodeConfig(max_new_tokens=12, k=3)


@pytest.fixture(scope="module")
def head(tiny_target):
    return tiny_head(tiny_target)


def _extra(method, tiny_draft, head):
    return {"classic": tiny_draft, "eagle": head, "eagle2": head, "eagle2-lookup": head}.get(method)


@pytest.mark.parametrize("method", ["ar", "ngram", "classic", "eagle", "eagle2", "eagle2-lookup"])
def test_a_second_turn_reuses_the_first_turns_cache_and_equals_a_fresh_run(
    tiny_target, tiny_draft, head, method
):
    extra = _extra(method, tiny_draft, head)
    conversation = PrefixCache()
    first_prompt = prompt(9)
    first = run(tiny_target, method, first_prompt, CONFIG, extra, prefix=conversation)
    assert first.reused_tokens == 0
    history = first_prompt + list(first.token_ids)
    cached = len(conversation.ids)
    assert conversation.ids == history[:cached] and cached >= len(history) - 1
    second_prompt = history + prompt(4, offset=11)[1:]
    second = run(tiny_target, method, second_prompt, CONFIG, extra, prefix=conversation)
    fresh = run(tiny_target, method, second_prompt, CONFIG, extra)
    assert second.token_ids == fresh.token_ids
    assert second.reused_tokens == cached
    assert second.prompt_tokens - 1 - second.reused_tokens <= 3  # only the new turn prefills


def test_an_edited_history_reuses_only_the_common_prefix(tiny_target):
    conversation = PrefixCache()
    first = run(tiny_target, "ar", prompt(9), CONFIG, prefix=conversation)
    edited = prompt(6) + prompt(5, offset=2)[1:]  # the first turn changed after 6 tokens
    second = run(tiny_target, "ar", edited, CONFIG, prefix=conversation)
    assert second.reused_tokens == 6
    assert second.token_ids == run(tiny_target, "ar", edited, CONFIG).token_ids
    assert first.new_tokens > 0


def test_a_cache_of_another_model_is_not_reused(tiny_target, tiny_draft):
    conversation = PrefixCache()
    run(tiny_draft, "ar", prompt(9), CONFIG, prefix=conversation)
    again = run(tiny_target, "ar", prompt(9), CONFIG, prefix=conversation)
    assert again.reused_tokens == 0


def test_a_run_stopped_at_a_step_leaves_a_consistent_cache(tiny_target):
    conversation = PrefixCache()
    ids = prompt(9)
    events = generate(
        tiny_target, build_drafter("ar", tiny_target), ids, CONFIG, prefix=conversation
    )
    steps = [next(events) for _ in range(4)]  # Started and three steps, then the consumer stops
    events.close()
    emitted = [t.id for step in steps[1:] for t in step.tokens]
    assert conversation.ids == (ids + emitted)[:-1]
    follow = ids + emitted + [5, 6]
    reused = run(tiny_target, "ar", follow, CONFIG, prefix=conversation)
    assert reused.reused_tokens == len(ids) + len(emitted) - 1  # the pending token is not cached
    assert reused.token_ids == run(tiny_target, "ar", follow, CONFIG).token_ids
