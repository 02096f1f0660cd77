"""At temperature 0 the decode loop verifies on the target's argmax ids; the general lossless
rule on the one-hot distributions must pick the same path and next token."""

from __future__ import annotations

import random

import pytest
import torch

from specdec_core.decoding.proposal import Proposal
from specdec_core.decoding.sampling import probs
from specdec_core.loop.decode import make_generator, verify_proposal
from specdec_core.verifiers import LosslessVerifier
from specdec_core.verifiers.greedy import argmax_ids, verify_greedy

VOCAB = 6  # few ids, so drafts often equal the argmax and paths run deep


def random_tree(rng: random.Random, nodes: int) -> tuple[int, ...]:
    return tuple(rng.randrange(-1, i) for i in range(nodes))  # parents come first


def general_rule(proposal: Proposal, logits: torch.Tensor) -> tuple[list[int], int]:
    p = probs(logits, temperature=0.0)
    return verify_proposal(proposal, p, LosslessVerifier(), make_generator(0, logits.device))


@pytest.mark.parametrize("shape", ["chain", "tree", "sampled tree"])
def test_greedy_verification_picks_the_lossless_rules_path_and_next_token(shape):
    rng = random.Random(shape)
    for case in range(300):
        nodes = rng.randrange(0, 9)
        tokens = [rng.randrange(VOCAB) for _ in range(nodes)]
        parents = None if shape == "chain" else random_tree(rng, nodes)
        draws = None
        q = None
        if shape == "sampled tree":
            draws = tuple(rng.sample(range(nodes), nodes)) if nodes else ()
            q = torch.nn.functional.one_hot(torch.tensor(tokens, dtype=torch.long), VOCAB).float()
            q = q.reshape(nodes, VOCAB)
        proposal = Proposal(tokens=tokens, q=q, parents=parents, draws=draws)
        generator = torch.Generator().manual_seed(case)
        logits = torch.randn(nodes + 1, VOCAB, generator=generator)
        argmax = argmax_ids(logits)
        assert verify_greedy(proposal, argmax) == general_rule(proposal, logits), (case, tokens)


def test_greedy_verification_accepts_a_whole_chain_and_emits_the_bonus_argmax():
    proposal = Proposal(tokens=[3, 1, 4])
    assert verify_greedy(proposal, [3, 1, 4, 5]) == ([0, 1, 2], 5)
    assert verify_greedy(proposal, [3, 2, 4, 5]) == ([0], 2)
    assert verify_greedy(Proposal(tokens=[]), [7]) == ([], 7)


def test_greedy_verification_descends_into_the_child_equal_to_the_argmax():
    # root children 0 (id 5) and 1 (id 2); node 2 (id 9) under node 1
    proposal = Proposal(tokens=[5, 2, 9], parents=(-1, -1, 1))
    assert verify_greedy(proposal, [2, 0, 9, 4]) == ([1, 2], 4)
    assert verify_greedy(proposal, [5, 8, 0, 0]) == ([0], 8)


def test_argmax_ids_break_ties_to_the_lowest_id_as_the_target_distribution_does():
    generator = torch.Generator().manual_seed(0)
    for width in (3, 100, 49_152):
        logits = torch.randint(0, 3, (8, width), generator=generator).float()  # many ties
        one_hot = probs(logits, temperature=0.0)
        assert argmax_ids(logits) == one_hot.argmax(-1).tolist()
        assert argmax_ids(logits) == [row.tolist().index(row.max().item()) for row in logits]
