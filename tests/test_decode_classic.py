"""The one decode loop with the classic drafter on tiny random models."""

import threading

import pytest
import torch

from specdec_core.decoding import kv_cache
from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.events import Finished, Started, Step, TokenKind
from specdec_core.decoding.target import Target
from specdec_core.drafters.classic import ClassicDrafter
from specdec_core.errors import SpecdecError
from specdec_core.loop.decode import generate
from specdec_core.run.runner import run
from tests.stats import first_two_pvalues
from tests.tiny import ar_and, prompt


@pytest.mark.parametrize("k", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("offset", range(4))
def test_greedy_classic_output_equals_target_greedy(tiny_target, tiny_draft, k, offset):
    ids = prompt(length=4 + offset, offset=offset)
    config = DecodeConfig(max_new_tokens=40, k=k)
    reference, speculative = ar_and(tiny_target, "classic", ids, config, tiny_draft)
    assert speculative.token_ids == reference.token_ids
    assert speculative.steps <= reference.steps


def test_greedy_classic_matches_transformers_generate(tiny_target, tiny_draft):
    ids = prompt()
    ours = run(tiny_target, "classic", ids, DecodeConfig(max_new_tokens=30, k=4), tiny_draft)
    hf = tiny_target.model.generate(
        torch.tensor([ids]), max_new_tokens=30, do_sample=False, pad_token_id=0
    )
    expected = hf[0, len(ids) :].tolist()
    assert list(ours.token_ids) == expected[: len(ours.token_ids)]


@pytest.mark.slow
@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_sampled_tokens_follow_target_distribution(tiny_target, tiny_draft, temperature, top_p):
    drafter = ClassicDrafter(tiny_draft.model, tiny_target.vocab_size)
    p_first, p_second, accepted = first_two_pvalues(
        tiny_target, drafter, temperature, top_p, samples=2500, seed=7
    )
    assert accepted > 500, "the test must exercise accepted drafts"
    assert p_first > 0.001  # the first tokens follow the target's distribution
    assert p_second > 0.001  # and so do the second ones


def test_rollback_leaves_caches_equal_to_a_fresh_prefill(tiny_target, tiny_draft):
    ids = prompt(length=6)
    target = Target(tiny_target.model)
    target.prefill(ids[:-1])
    drafter = ClassicDrafter(tiny_draft.model, tiny_target.vocab_size)
    drafter.begin(ids, None)
    proposal = drafter.propose(ids, DecodeConfig(k=4), torch.Generator())
    start = target.length
    target.forward([ids[-1], *proposal.tokens])
    accepted = 2  # keep the pending token and two drafts, as after a rejection at position 3
    target.keep(start, list(range(accepted + 1)))
    committed = [*ids, *proposal.tokens[:accepted], 11]
    drafter.commit(committed, accepted, None)

    fresh = Target(tiny_target.model)
    fresh.prefill(committed[:-1])
    _assert_caches_equal(target.cache, fresh.cache)
    fresh_draft = kv_cache.new_cache(tiny_draft.model.config)
    length = kv_cache.cache_length(drafter.cache)
    ids = torch.tensor([committed[:length]])
    tiny_draft.model(ids, **kv_cache.cache_arg(fresh_draft), use_cache=True)
    _assert_caches_equal(drafter.cache, fresh_draft)


def _assert_caches_equal(a, b):
    assert kv_cache.cache_length(a) == kv_cache.cache_length(b)
    for layer_a, layer_b in zip(a.layers, b.layers, strict=True):
        torch.testing.assert_close(layer_a.keys, layer_b.keys, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(layer_a.values, layer_b.values, atol=1e-5, rtol=1e-4)


def test_stop_flag_ends_the_loop_before_the_next_step(tiny_target, tiny_draft):
    stop = threading.Event()
    drafter = ClassicDrafter(tiny_draft.model, tiny_target.vocab_size)
    steps_after_stop = 0
    events = generate(tiny_target, drafter, prompt(), DecodeConfig(max_new_tokens=60), stop=stop)
    for event in events:
        if isinstance(event, Step):
            steps_after_stop += stop.is_set()
            stop.set()
        if isinstance(event, Finished):
            assert event.summary.stop_reason == "stopped"
    assert steps_after_stop == 0


def test_events_describe_every_token(tiny_target, tiny_draft):
    drafter = ClassicDrafter(tiny_draft.model, tiny_target.vocab_size)
    events = list(generate(tiny_target, drafter, prompt(), DecodeConfig(max_new_tokens=25, k=3)))
    assert isinstance(events[0], Started) and isinstance(events[-1], Finished)
    steps = [e for e in events if isinstance(e, Step)]
    summary = events[-1].summary
    emitted = [t.id for s in steps for t in s.tokens]
    assert tuple(emitted) == summary.token_ids and summary.steps == len(steps)
    for step in steps:
        kinds = [t.kind for t in step.tokens]
        assert kinds[: step.accepted] == [TokenKind.ACCEPTED_DRAFT] * step.accepted
        if len(step.tokens) > step.accepted:  # not cut by max tokens
            last = TokenKind.BONUS if step.accepted == step.drafted else TokenKind.CORRECTION
            assert kinds[-1] == last
        assert all(0.0 <= t.p_target <= 1.0 for t in step.tokens)
    assert summary.mean_accept_length == pytest.approx(summary.new_tokens / summary.steps)


def test_max_new_tokens_is_exact_even_mid_draft(tiny_target, tiny_draft):
    summary = run(tiny_target, "classic", prompt(), DecodeConfig(max_new_tokens=7, k=5), tiny_draft)
    assert summary.new_tokens == 7 and summary.stop_reason == "max_tokens"


def test_generation_stops_at_eos(tiny_target):
    eos = 2
    with torch.no_grad():
        saved = tiny_target.model.lm_head.weight[eos].clone()
        tiny_target.model.lm_head.weight[eos] = 50 * tiny_target.model.lm_head.weight[5]
    try:
        summary = run(tiny_target, "ar", prompt(), DecodeConfig(max_new_tokens=50))
    finally:
        with torch.no_grad():
            tiny_target.model.lm_head.weight[eos] = saved
    assert summary.stop_reason == "eos" and summary.token_ids[-1] == eos


def test_empty_and_overlong_prompts_are_refused(tiny_target):
    with pytest.raises(SpecdecError, match="empty"):
        run(tiny_target, "ar", [], DecodeConfig())
    with pytest.raises(SpecdecError, match="context"):
        run(tiny_target, "ar", [5] * 300, DecodeConfig())
