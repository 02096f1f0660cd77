"""The `peagle` drafter in the one decode loop: lossless at T = 0 and T > 0, one head pass per
step, and a cache that holds only real pairs after every commit."""

import pytest
import torch

from specdec_core.decoding import kv_cache
from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.target import Target
from specdec_core.drafters.peagle import PEagleDrafter
from specdec_core.run.runner import run
from tests.stats import first_two_pvalues
from tests.test_peagle_formats import tiny_peagle
from tests.tiny import ar_and, prompt


@pytest.mark.parametrize("layers, own_embedding, draft_vocab", [(1, False, 12), (2, True, 32)])
@pytest.mark.parametrize("k", [1, 3, 6])
@pytest.mark.parametrize("offset", range(2))
def test_greedy_peagle_output_equals_target_greedy(
    tiny_target, layers, own_embedding, draft_vocab, k, offset
):
    head = tiny_peagle(tiny_target, layers, draft_vocab, own_embedding)
    ids = prompt(length=3 + offset, offset=offset)
    config = DecodeConfig(max_new_tokens=40, k=k)
    reference, speculative = ar_and(tiny_target, "peagle", ids, config, head)
    assert speculative.token_ids == reference.token_ids
    assert speculative.steps <= reference.steps


def test_one_token_prompt_decodes_like_ar(tiny_target):
    head = tiny_peagle(tiny_target)
    config = DecodeConfig(max_new_tokens=12, k=3)
    assert (
        run(tiny_target, "peagle", [1], config, head).token_ids
        == run(tiny_target, "ar", [1], config).token_ids
    )


def test_each_proposal_is_one_head_pass(tiny_target, monkeypatch):
    head = tiny_peagle(tiny_target, layers=2)
    passes = []
    step = head.step
    monkeypatch.setattr(head, "step", lambda *a, **kw: passes.append(1) or step(*a, **kw))
    drafter = PEagleDrafter(head, 2)
    ids = prompt(length=6)
    target = Target(tiny_target.model, drafter.feature_layers)
    drafter.begin(ids, target.prefill(ids[:-1]))
    proposal = drafter.propose(ids, DecodeConfig(k=5), torch.Generator())
    assert len(proposal.tokens) == 5 and len(passes) == 1


def test_commit_leaves_the_cache_equal_to_a_fresh_run(tiny_target):
    """After a rejection, the next pass starts from exactly the real (feature, token) pairs."""
    head = tiny_peagle(tiny_target, layers=2)
    drafter = PEagleDrafter(head, 2)
    ids = prompt(length=6)
    target = Target(tiny_target.model, drafter.feature_layers)
    drafter.begin(ids, target.prefill(ids[:-1]))
    proposal = drafter.propose(ids, DecodeConfig(k=4), torch.Generator())
    assert kv_cache.cache_length(drafter.cache) == len(ids) - 1  # mask rows cut off
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
    after = drafter.propose(committed, DecodeConfig(k=4, temperature=1.0), torch.Generator())

    fresh = PEagleDrafter(head, 2)
    fresh.begin(committed, Target(tiny_target.model, fresh.feature_layers).prefill(committed[:-1]))
    expected = fresh.propose(committed, DecodeConfig(k=4, temperature=1.0), torch.Generator())
    torch.testing.assert_close(after.q, expected.q, atol=1e-5, rtol=1e-4)
    assert kv_cache.cache_length(drafter.cache) == len(committed) - 1


@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 0.9)])
@pytest.mark.slow
def test_sampled_tokens_follow_target_distribution(tiny_target, temperature, top_p):
    drafter = PEagleDrafter(tiny_peagle(tiny_target, layers=2), 2)
    p_first, p_second, accepted = first_two_pvalues(
        tiny_target, drafter, temperature, top_p, samples=2000, seed=11
    )
    assert accepted > 100, "the test must exercise accepted drafts"
    assert p_first > 0.001 and p_second > 0.001


@pytest.mark.slow
def test_the_sampling_test_detects_drafts_drawn_off_their_reported_q(tiny_target, monkeypatch):
    """Power check: drafts drawn from q² (renormalised) while q is reported must fail."""
    import specdec_core.drafters.peagle as peagle
    from specdec_core.decoding.sampling import sample

    monkeypatch.setattr(peagle, "sample", lambda q, g: sample(q * q / (q * q).sum(), g))
    drafter = PEagleDrafter(tiny_peagle(tiny_target, layers=2), 2)
    p_first, p_second, _ = first_two_pvalues(tiny_target, drafter, 1.0, 1.0, samples=1500, seed=11)
    assert min(p_first, p_second) < 1e-3
