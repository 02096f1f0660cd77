"""The lossless rule as a pure function: exact at T=0, distribution-preserving at T>0."""

import torch

from specdec_core.sampling import probs
from specdec_core.verifiers import speculative_accept
from tests.stats import chi_square_pvalue


def test_greedy_accepts_while_draft_equals_target_argmax():
    logits = torch.tensor([[0.0, 5, 1], [3, 0, 1], [0, 0, 9], [1, 2, 0]])  # argmax 1, 0, 2, 1
    p = probs(logits, 0.0)
    draft = torch.tensor([1, 0, 1])
    q = torch.nn.functional.one_hot(draft, 3).float()
    verdict = speculative_accept(draft, q, p, torch.Generator().manual_seed(0))
    assert (verdict.accepted, verdict.next_token) == (2, 2)


def test_greedy_full_acceptance_emits_bonus_token():
    p = probs(torch.tensor([[0.0, 5, 1], [3, 0, 1]]), 0.0)
    draft = torch.tensor([1])
    verdict = speculative_accept(draft, torch.eye(3)[[1]], p, None)
    assert (verdict.accepted, verdict.next_token) == (1, 0)


def test_first_token_is_distributed_as_target_whatever_the_draft():
    generator = torch.Generator().manual_seed(123)
    p_row = torch.tensor([0.05, 0.4, 0.25, 0.2, 0.1])
    q_row = torch.tensor([0.5, 0.1, 0.1, 0.1, 0.2])  # a poor draft
    p = torch.stack([p_row, p_row])
    q = q_row[None]
    samples = []
    for _ in range(6000):
        x = int(torch.multinomial(q_row, 1, generator=generator))
        verdict = speculative_accept(torch.tensor([x]), q, p, generator)
        samples.append(x if verdict.accepted else verdict.next_token)
    assert chi_square_pvalue(samples, p_row) > 0.001


def test_top_p_keeps_smallest_set_reaching_the_mass():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    p = probs(logits, 1.0, top_p=0.8)
    assert torch.allclose(p, torch.tensor([0.5 / 0.8, 0.3 / 0.8, 0.0, 0.0]))
