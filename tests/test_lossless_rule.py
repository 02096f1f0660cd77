"""The lossless rule as a pure function: exact at T=0, distribution-preserving at T>0."""

import torch

from specdec_core.decoding.sampling import probs
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


def test_top_p_keeps_the_lower_id_among_equally_likely_tokens():
    p = torch.tensor([0.3, 0.2, 0.2, 0.2, 0.1])  # the nucleus of 0.6 ends inside the tie
    assert probs(torch.log(p), 1.0, top_p=0.6).nonzero().flatten().tolist() == [0, 1, 2]
    wide = torch.full((3000,), 0.1 / 2996)  # past TOP_P_CANDIDATES: ranked in part
    wide[[3, 10, 700, 2500]] = torch.tensor([0.3, 0.2, 0.2, 0.2])
    assert probs(torch.log(wide), 1.0, top_p=0.6).nonzero().flatten().tolist() == [3, 10, 700]
    straddling = torch.zeros(3000)  # the nucleus ends among 2000 equals, past the candidates
    straddling[0], straddling[1000:] = 0.75, 0.25 / 2000
    kept = probs(torch.log(straddling), 1.0, top_p=0.80005).nonzero().flatten().tolist()
    assert kept == [0, *range(1000, 1401)]


def test_top_p_keeps_what_ranking_every_token_keeps():
    """Rows peaked and flat, with and without ties, over vocabularies past TOP_P_CANDIDATES:
    the same tokens with the same bits as ranking the whole row (equal ones by id)."""

    def ranking_all(p: torch.Tensor, top_p: float) -> torch.Tensor:
        ranked, order = torch.sort(p, dim=-1, descending=True, stable=True)
        ranked = ranked.masked_fill(ranked.cumsum(-1) - ranked >= top_p, 0.0)
        kept = torch.zeros_like(p).scatter(-1, order, ranked)
        return kept / kept.sum(-1, keepdim=True)

    generator = torch.Generator().manual_seed(0)
    for trial in range(240):
        logits = torch.randn(3, (4000, 1100, 20)[trial % 3], generator=generator)
        logits = logits * (0.5, 2.0, 6.0, 20.0)[trial % 4]  # flat to peaked
        logits[trial % 3] *= (0.5, 1.0, 3.0)[trial % 3]  # the rows of a step differ
        if trial % 2:
            logits = (logits * 2).round()  # many exact ties
        top_p = (0.5, 0.8, 0.9, 0.95, 0.99)[trial % 5]
        assert torch.equal(probs(logits, 1.0, top_p), ranking_all(logits.softmax(-1), top_p))
        assert torch.equal(probs(logits[0], 1.0, top_p), ranking_all(logits[0].softmax(-1), top_p))
