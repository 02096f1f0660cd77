"""The `eagle` chain drafter in the one decode loop, on tiny random targets and heads."""

import pytest
import torch

from specdec_core.decoding import kv_cache
from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.target import Target
from specdec_core.drafters.eagle import EagleDrafter, head_features
from specdec_core.run.runner import run
from tests.eagle_tiny import tiny_head
from tests.stats import first_two_pvalues
from tests.tiny import ar_and, prompt

HEADS = [("eagle1", 0), ("eagle1", 12), ("eagle3", 12)]


@pytest.mark.parametrize("kind, draft_vocab", HEADS)
@pytest.mark.parametrize("k", [1, 3, 6])
@pytest.mark.parametrize("offset", range(3))
def test_greedy_eagle_output_equals_target_greedy(tiny_target, kind, draft_vocab, k, offset):
    head = tiny_head(tiny_target, kind, draft_vocab)
    ids = prompt(length=3 + offset, offset=offset)
    config = DecodeConfig(max_new_tokens=40, k=k)
    reference, speculative = ar_and(tiny_target, "eagle", ids, config, head)
    assert speculative.token_ids == reference.token_ids
    assert speculative.steps <= reference.steps


def test_one_token_prompt_starts_drafting_after_the_first_step(tiny_target):
    head = tiny_head(tiny_target)
    config = DecodeConfig(max_new_tokens=12, k=3)
    reference = run(tiny_target, "ar", [1], config)
    assert run(tiny_target, "eagle", [1], config, head).token_ids == reference.token_ids


@pytest.mark.parametrize(
    "kind, draft_vocab, temperature, top_p",
    [("eagle1", 0, 1.0, 1.0), ("eagle1", 0, 0.7, 0.9), ("eagle3", 12, 1.0, 1.0)],
)
@pytest.mark.slow
def test_sampled_tokens_follow_target_distribution(
    tiny_target, kind, draft_vocab, temperature, top_p
):
    drafter = EagleDrafter(tiny_head(tiny_target, kind, draft_vocab), 2)
    p_first, p_second, accepted = first_two_pvalues(
        tiny_target, drafter, temperature, top_p, samples=2000, seed=11
    )
    assert accepted > 200, "the test must exercise accepted drafts"
    assert p_first > 0.001  # the first tokens follow the target's distribution
    assert p_second > 0.001  # and so do the second ones


@pytest.mark.parametrize("kind", ["eagle1", "eagle3"])
def test_head_rollback_leaves_its_cache_equal_to_a_fresh_run(tiny_target, kind):
    """After a rejection the head's cache holds exactly the real (feature, next token) pairs."""
    head = tiny_head(tiny_target, kind, 12 if kind == "eagle3" else 0)
    drafter = EagleDrafter(head, 2)
    ids = prompt(length=6)
    target = Target(tiny_target.model, drafter.feature_layers)
    drafter.begin(ids, target.prefill(ids[:-1]))
    proposal = drafter.propose(ids, DecodeConfig(k=4), torch.Generator())
    start = target.length
    out = target.forward([ids[-1], *proposal.tokens])
    accepted = 2
    target.keep(start, list(range(accepted + 1)))
    committed = [*ids, *proposal.tokens[:accepted], 11]
    rows = torch.arange(accepted + 1)
    drafter.commit(
        committed,
        accepted,
        type(out)(None, out.hidden[rows], tuple(h[rows] for h in out.layer_hidden)),
    )

    features = Target(tiny_target.model, drafter.feature_layers).prefill(committed[:-1])
    fresh = head.new_cache()
    n = len(committed) - 1
    expected = head.step(
        head_features(head, features)[None],
        torch.tensor([committed[1:]]),
        torch.arange(n)[None],
        None,
        fresh,
    )
    assert kv_cache.cache_length(drafter.cache) == kv_cache.cache_length(fresh) == n
    for a, b in zip(drafter.cache.layers, fresh.layers, strict=True):
        torch.testing.assert_close(a.keys, b.keys, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(a.values, b.values, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(drafter.last[1], expected.logits[0, -1], atol=1e-5, rtol=1e-4)
