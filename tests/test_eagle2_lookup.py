"""EAGLE-2 + prompt lookup on tiny random models: merging, greedy identity, lossless sampling."""

from __future__ import annotations

import pytest
import torch

from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.events import Step
from specdec_core.decoding.proposal import EMPTY, Proposal
from specdec_core.decoding.sampling import probs
from specdec_core.decoding.target import Target
from specdec_core.drafters.eagle2.lookup import (
    LOOKUP_SCORE,
    Eagle2LookupDrafter,
    merge_chain,
    merge_lookup,
)
from specdec_core.drafters.eagle2.sizing import head_levels
from specdec_core.drafters.ngram import prompt_lookup
from specdec_core.loop.decode import generate
from specdec_core.run.methods import build_drafter, is_tree
from specdec_core.run.runner import run
from tests.eagle_tiny import tiny_head
from tests.stats import chi_square_pvalue
from tests.test_tree import joint_first_two, sample_first_two
from tests.tiny import VOCAB, prompt


def test_merge_chain_shares_the_nodes_it_has_and_appends_the_rest():
    tokens, parents, scores = [5, 6, 7], (-1, -1, 0), (-0.1, -0.5, -0.3)
    merged = merge_chain(tokens, parents, scores, [5, 7, 9, 4])
    assert merged == (
        [5, 6, 7, 9, 4],
        (-1, -1, 0, 2, 3),
        (-0.1, -0.5, -0.3, LOOKUP_SCORE, LOOKUP_SCORE),
    )
    assert merge_chain(tokens, parents, scores, [8])[:2] == ([5, 6, 7, 8], (-1, -1, 0, -1))
    assert merge_chain([], (), (), [3, 3]) == ([3, 3], (-1, 0), (LOOKUP_SCORE, LOOKUP_SCORE))
    assert merge_chain(tokens, parents, scores, [])[:2] == (tokens, parents)


def test_lookup_post_processing_merges_the_ngram_chain_into_a_given_proposal():
    ids = [1, 4, 5, 7, 9, 4, 5]  # the lookup continues "4 5" with [7, 9, 4, 5]
    config = DecodeConfig(k=4)
    chain = prompt_lookup(ids, config.k, config.ngram_max)
    assert chain == [7, 9, 4, 5]
    tree = Proposal(tokens=[7, 8, 3], parents=(-1, -1, 0), scores=(-0.1, -0.5, -0.3))
    merged = merge_lookup(ids, config, tree)
    assert (merged.tokens, merged.parents) == ([7, 8, 3, 9, 4, 5], (-1, -1, 0, 0, 3, 4))
    assert merged.scores == (*tree.scores, LOOKUP_SCORE, LOOKUP_SCORE, LOOKUP_SCORE)
    assert merged.q is None and merged.draws is None
    assert tree.tokens == [7, 8, 3] and tree.parents == (-1, -1, 0)  # the input is unchanged
    assert merge_lookup([1, 2, 3], config, tree) is tree  # no match: the tree as it was
    assert merge_lookup(ids, config, EMPTY).parents == (-1, 0, 1, 2)  # the chain alone

    q = torch.softmax(torch.randn(3, VOCAB), -1)  # a sampled tree: 7 drawn twice at the root
    sampled = Proposal(tokens=[7, 8, 3], q=q, parents=(-1, -1, 0), scores=tree.scores,
                       draws=(0, 1, 0, 2))  # fmt: skip
    merged = merge_lookup(ids, config, sampled)
    assert merged.draws == (0, 1, 0, 2, 3, 4, 5)  # lookup nodes tried after the drawn ones
    assert torch.equal(merged.q[:3], q)
    for node, token in zip((3, 4, 5), (9, 4, 5), strict=True):  # one-hot on the lookup token
        assert merged.q[node, token] == 1 and merged.q[node].sum() == 1


def test_head_levels_stop_counting_where_the_path_leaves_the_heads_nodes():
    tokens, parents = [5, 6, 7, 9], (-1, -1, 0, 2)  # node 3 was added by the lookup
    assert head_levels(tokens, parents, 4, [5, 7, 9, 1]) == (3, 3)  # all head nodes
    assert head_levels(tokens, parents, 3, [5, 7, 9, 1]) == (2, 2)  # 9 is the lookup's
    assert head_levels(tokens, parents, 3, [6, 1]) == (1, 0)  # 6: not the top-1, a leaf
    assert head_levels(tokens, parents, 3, [8]) == (1, 0)  # rejected at the first level


def test_eagle2_lookup_is_a_registered_tree_method(tiny_target):
    drafter = build_drafter("eagle2-lookup", tiny_target, tiny_head(tiny_target))
    assert isinstance(drafter, Eagle2LookupDrafter) and is_tree("eagle2-lookup")
    assert not is_tree("ngram") and not is_tree("hf-lookup")


@pytest.mark.parametrize("offset", range(3))
def test_greedy_eagle2_lookup_output_equals_target_greedy(tiny_target, offset):
    ids = prompt(length=5 + offset, offset=offset)
    config = DecodeConfig(max_new_tokens=60, k=4)
    reference = run(tiny_target, "ar", ids, config)
    drafter = Eagle2LookupDrafter(tiny_head(tiny_target), tiny_target.model)
    events = list(generate(tiny_target, drafter, ids, config))
    assert events[-1].summary.token_ids == reference.token_ids
    steps = [e for e in events if isinstance(e, Step)]
    lookup_accepted = sum(
        s.tree.scores[node] == LOOKUP_SCORE for s in steps for node in s.tree.accepted
    )
    assert lookup_accepted > 0  # the lookup branch was verified and taken, not just drafted


def _prompt_with_a_likely_lookup(target) -> list[int]:
    """[1, a, b, x, a, b] (lookup proposes x) with the x the target most likely says next."""
    xs = torch.arange(3, VOCAB)
    best, best_chance = [], 0.0
    for a in range(3, VOCAB):
        for b in range(3, VOCAB):
            batch = torch.stack([torch.tensor([1, a, b, x, a, b]) for x in xs.tolist()])
            with torch.no_grad():
                p = probs(target.model(batch).logits[:, -1], 1.0, 1.0)  # [len(xs), V]
            chance = p[torch.arange(len(xs)), xs]
            if chance.max() > best_chance:
                best_chance = float(chance.max())
                best = [1, a, b, int(xs[chance.argmax()]), a, b]
    assert best_chance > 0.1  # the lookup node is accepted in >10% of the samples
    return best


@pytest.mark.slow
@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_eagle2_lookup_sampling_follows_target_distribution(tiny_target, temperature, top_p):
    ids = _prompt_with_a_likely_lookup(tiny_target)
    config = DecodeConfig(
        max_new_tokens=2,
        k=4,
        temperature=temperature,
        top_p=top_p,
        tree_depth=2,
        tree_topk=3,
        tree_tokens=5,
    )
    drafter = Eagle2LookupDrafter(tiny_head(tiny_target), tiny_target.model)
    drafter.begin(ids, Target(tiny_target.model).prefill(ids[:-1]))
    first = drafter.propose(ids, config, torch.Generator())
    assert prompt_lookup(ids, 4, 3)[0] == ids[3]
    assert LOOKUP_SCORE in first.scores  # the chain runs deeper than the head's tree
    samples = 3000
    drawn, accepted = sample_first_two(tiny_target, drafter, ids, config, samples, seed=17)
    expected = joint_first_two(tiny_target.model, ids, temperature, top_p)
    assert chi_square_pvalue(drawn, expected) > 1e-3
    assert 0.1 * samples < accepted  # the tree, not only the residual, was sampled from
