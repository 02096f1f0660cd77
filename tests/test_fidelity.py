"""The distance of a policy's emitted token from the target's distribution: the closed form is
what the policies' own `verify` emits, the lossless rule is at distance 0, and windowed rules get
an estimate with a standard error that covers the exact value."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from specdec_core.decoding.sampling import probs
from specdec_core.errors import SpecdecError
from specdec_core.measurement.fidelity import (
    divergence,
    fly_induced,
    induced_distribution,
    ngram_distance,
    policy_distance,
    residual,
    sampled_distance,
)
from specdec_core.verifiers import make_verifier
from tests.stats import chi_square_pvalue

V = 6
SINGLE_TOKEN = {
    "lossless": {},
    "threshold": {"tau": 0.2},
    "typical": {},
    "cosine": {"tau": 0.8},
    "ensemble": {"w": 0.5},
}


def rows(seed: int, temperature: float, deterministic: bool):
    """(q row or None, the drafted token if deterministic, p row, π row) at one position."""
    generator = torch.Generator().manual_seed(seed)
    logits = 2.0 * torch.randn(V, generator=generator)
    draft_logits = logits + 1.5 * torch.randn(V, generator=generator)
    pi = probs(logits, temperature if temperature > 0 else 1.0)
    p = probs(logits, temperature)
    if deterministic or temperature == 0:  # one-hot q on a token the target does not prefer
        token = int(pi.argsort()[-2])
        return None, token, p, pi
    return probs(draft_logits, temperature), None, p, pi


def emitted(policy, q, token, p, pi, samples: int, seed: int) -> list[int]:
    """The token each of `samples` one-token chains emits at its drafted position."""
    generator = torch.Generator().manual_seed(seed)
    bonus = torch.full((V,), 1.0 / V)  # the row after the drafted token: not the emitted one
    p2, pi2 = torch.stack([p, bonus]), torch.stack([pi, bonus])
    out = []
    for _ in range(samples):
        x = token if q is None else int(torch.multinomial(q, 1, generator=generator))
        q_rows = None if q is None else q[None]
        verdict = policy.verify(torch.tensor([x]), q_rows, p2, generator, p_soft=pi2)
        out.append(x if verdict.accepted else verdict.next_token)
    return out


def assert_fits(drawn: list[int], exact: torch.Tensor) -> None:
    """The samples follow `exact`: chi-square, or every sample on the one token of a point mass."""
    if float(exact.max()) > 1.0 - 1e-6:
        assert set(drawn) == {int(exact.argmax())}
    else:
        assert chi_square_pvalue(drawn, exact.float()) > 1e-3


def row_q(q, token) -> torch.Tensor:
    return q if q is not None else torch.nn.functional.one_hot(torch.tensor(token), V).float()


CASES = [(1.0, False), (1.0, True), (0.0, True)]  # (temperature, deterministic drafter)


@pytest.mark.parametrize("temperature,deterministic", CASES)
@pytest.mark.parametrize("name", list(SINGLE_TOKEN))
def test_the_closed_form_is_what_the_policy_emits(name, temperature, deterministic):
    policy = make_verifier(name, **SINGLE_TOKEN[name])
    q, token, p, pi = rows(0, temperature, deterministic)
    exact = induced_distribution(policy, row_q(q, token), p, pi)
    assert math.isclose(float(exact.sum()), 1.0, abs_tol=1e-6)  # float32 rows
    assert_fits(emitted(policy, q, token, p, pi, 1500, 0), exact)


def test_a_wrong_fallback_fails_the_same_check():
    """Mutated: refusals drawn from p instead of the residual; the check must see it."""
    policy = make_verifier("threshold", tau=0.2)
    q, token, p, pi = rows(0, 1.0, False)
    accept = (pi >= 0.2).double()
    kept = q.double() * accept
    wrong = kept + (1 - kept.sum()) * p.double()
    assert not torch.allclose(wrong, induced_distribution(policy, q, p, pi))
    drawn = emitted(policy, q, None, p, pi, 1500, 0)
    assert chi_square_pvalue(drawn, wrong.float()) < 1e-3


@pytest.mark.parametrize("top_p", [1.0, 0.8])
@pytest.mark.parametrize("deterministic", [False, True])
def test_lossless_is_at_distance_zero(top_p, deterministic):
    lossless = make_verifier("lossless")
    for seed in range(10):
        generator = torch.Generator().manual_seed(seed)
        p = probs(torch.randn(V, generator=generator), 0.7, top_p)
        q = probs(torch.randn(V, generator=generator), 0.7, top_p)
        if deterministic:
            q = torch.nn.functional.one_hot(torch.tensor(seed % V), V).float()
        tv, kl = divergence(induced_distribution(lossless, q, p), p)
        assert tv < 1e-6 and kl < 1e-6  # 0 up to float32 rounding


def test_at_greedy_an_accepted_wrong_token_is_the_whole_distance():
    q, token, p, pi = rows(0, 0.0, True)  # the drafted token is the target's second choice
    accepts = make_verifier("threshold", tau=float(pi[token]) / 2)
    refuses = make_verifier("threshold", tau=0.99)
    assert divergence(induced_distribution(accepts, row_q(q, token), p, pi), p) == (1.0, math.inf)
    assert divergence(induced_distribution(refuses, row_q(q, token), p, pi), p) == (0.0, 0.0)


def test_ensemble_emits_the_mixture():
    q, _, p, pi = rows(1, 1.0, False)
    induced = induced_distribution(make_verifier("ensemble", w=0.3), q, p, pi)
    assert torch.allclose(induced, (0.3 * p + 0.7 * q).double(), atol=1e-6)


def test_a_windowed_rule_has_no_closed_form():
    with pytest.raises(SpecdecError, match="policy_distance"):
        induced_distribution(make_verifier("fly"), torch.ones(V) / V, torch.ones(V) / V)


def _windowed_case(seed: int, temperature: float = 0.0, k: int = 3, vocab: int = 4):
    """Rows for a k-token chain over a tiny vocabulary, the draft's q sampled."""
    generator = torch.Generator().manual_seed(seed)
    logits = 2.0 * torch.randn(k + 1, vocab, generator=generator)
    pi = torch.softmax(logits, -1)
    p = probs(logits, temperature)
    q = torch.softmax(logits[:k] + torch.randn(k, vocab, generator=generator), -1)
    return q.argmax(-1), q, p, pi


def _enumerated(policy, q, p, pi) -> torch.Tensor:
    """The exact distribution at position 0, every chain x_i ~ q_i enumerated (for a policy whose
    acceptance the chain decides: FLy at T = 0, the n-gram rules at any T)."""
    k, vocab = q.shape
    kept = torch.zeros(vocab, dtype=torch.float64)
    for chain in itertools.product(range(vocab), repeat=k):
        weight = math.prod(float(q[i, x]) for i, x in enumerate(chain))
        verdict = policy.verify(torch.tensor(chain), q, p, torch.Generator(), p_soft=pi)
        if verdict.accepted:
            kept[chain[0]] += weight
    return kept + (1 - kept.sum()) * residual(p[0], q[0]).double()


def _fly_emitted(policy, q, p, pi, samples: int, seed: int) -> list[int]:
    """The token FLy emits first on each of `samples` chains x_i ~ q_i verified by it."""
    generator = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(samples):
        chain = torch.multinomial(q, 1, generator=generator)[:, 0]
        verdict = policy.verify(chain, q, p, generator, p_soft=pi)
        out.append(int(chain[0]) if verdict.accepted else verdict.next_token)
    return out


def test_flys_closed_form_is_what_its_verifier_emits_and_a_mutated_one_is_not():
    policy = make_verifier("fly", entropy_threshold=0.0, window=1)
    _, q, p, pi = _windowed_case(3, temperature=1.0, k=2, vocab=5)
    exact = fly_induced(policy, q, p, pi)
    drawn = _fly_emitted(policy, q, p, pi, 3000, 0)
    assert chi_square_pvalue(drawn, exact.float()) > 1e-3
    native = make_verifier("fly", entropy_threshold=0.0, window=0)  # the window always passes
    wrong = fly_induced(native, q, p, pi)
    assert float((wrong - exact).abs().sum()) > 0.05
    assert chi_square_pvalue(drawn, wrong.float()) < 1e-3


def test_flys_closed_form_matches_enumeration_of_greedy_chains():
    draft, q, p, pi = _windowed_case(4, temperature=0.0)
    policy = make_verifier("fly", entropy_threshold=0.0, window=1)
    exact = _enumerated(policy, q, p, pi)
    assert torch.allclose(fly_induced(policy, q, p, pi), exact)


def test_a_fly_window_that_does_not_fit_is_lossless_on_a_large_vocabulary():
    """k = 2 drafted, W = 6: only the native rule decides, P = p exactly, with no sampling
    noise to read as distance however many tokens the draft spreads over."""
    draft, q, p, pi = _windowed_case(5, temperature=1.0, k=2, vocab=2000)
    distance = policy_distance(make_verifier("fly"), draft, q, p, pi, torch.Generator())
    assert distance.exact
    assert distance.total_variation == pytest.approx(0.0, abs=1e-6)
    assert distance.kl == pytest.approx(0.0, abs=1e-6)


WINDOWED = [
    ("ngram", {"n": 2, "tau": 0.5}, 0.0),
    ("ngram", {"n": 2, "tau": 0.5}, 1.0),
    ("hybrid", {"ngram_tau": 0.5, "logit_tau": 0.05}, 1.0),
]


ESTIMATES = {
    "counted first tokens": sampled_distance,  # any windowed rule
    "n-gram form": policy_distance,  # what a run measures for ngram and hybrid
}


@pytest.mark.parametrize("estimate_with", ESTIMATES.values(), ids=ESTIMATES.keys())
@pytest.mark.parametrize("name,params,temperature", WINDOWED)
def test_the_sampled_estimate_covers_the_exact_value(name, params, temperature, estimate_with):
    policy = make_verifier(name, **params)
    for seed in range(2):
        draft, q, p, pi = _windowed_case(seed, temperature)
        exact_tv, exact_kl = divergence(_enumerated(policy, q, p, pi), p[0])
        generator = torch.Generator().manual_seed(seed)
        estimate = estimate_with(policy, draft, q, p, pi, generator, samples=500)
        assert not estimate.exact and estimate.samples == 500
        assert exact_tv > 0.02 and estimate.total_variation_se > 0  # something to estimate
        assert abs(estimate.total_variation - exact_tv) <= 4 * estimate.total_variation_se + 0.01
        assert math.isfinite(exact_kl) == (temperature > 0)  # at T = 0 any distortion is inf
        if temperature > 0:
            assert abs(estimate.kl - exact_kl) <= 4 * estimate.kl_se + 0.01


def test_the_n_gram_form_is_exact_where_the_continuation_never_matches():
    """Continuations that never write the greedy g1: only x = g0 is approved, whatever the draft
    spreads over 2000 tokens, so the emitted distribution is known exactly and so is the form."""
    vocab = 2000
    draft, q, p, pi = _windowed_case(6, temperature=1.0, k=2, vocab=vocab)
    greedy = pi[:2].argmax(-1)
    q = q.clone()
    q[1, greedy[1]] = 0.0  # the continuation never writes g1
    q[1] /= q[1].sum()
    policy = make_verifier("ngram", n=2, tau=0.5)
    kept = torch.zeros(vocab, dtype=torch.float64)
    kept[greedy[0]] = q[0, greedy[0]].double()
    exact = divergence(kept + (1 - kept.sum()) * residual(p[0], q[0]).double(), p[0])
    generator = torch.Generator().manual_seed(0)
    estimate = ngram_distance(policy, draft, q, p, pi, generator, samples=64)
    assert (estimate.total_variation, estimate.kl) == pytest.approx(exact, abs=1e-6)
    assert estimate.total_variation_se == pytest.approx(0.0, abs=1e-12)


def test_a_deterministic_draft_gives_an_exact_estimate():
    """Greedy target, drafted chain fixed: every sample is the same verdict, the error is 0."""
    draft, _, p, pi = _windowed_case(0)
    policy = make_verifier("ngram", n=2, tau=0.5)
    estimate = sampled_distance(policy, draft, None, p, pi, torch.Generator(), samples=64)
    one_hot = torch.nn.functional.one_hot(draft, p.shape[-1]).float()
    exact = divergence(_enumerated(policy, one_hot, p, pi), p[0])
    assert (estimate.total_variation, estimate.kl) == pytest.approx(exact)
    assert estimate.total_variation_se == pytest.approx(0.0, abs=1e-12)


def test_the_step_distance_is_exact_or_sampled_by_rule():
    draft, q, p, pi = _windowed_case(2)
    generator = torch.Generator().manual_seed(0)
    closed = policy_distance(make_verifier("threshold"), draft, q, p, pi, generator)
    assert closed.exact
    expected = divergence(induced_distribution(make_verifier("threshold"), q[0], p[0], pi[0]), p[0])
    assert (closed.total_variation, closed.kl) == expected
    fly = policy_distance(make_verifier("fly", window=1), draft, q, p, pi, generator)
    assert fly.exact
    sampled = policy_distance(make_verifier("ngram"), draft, q, p, pi, generator, samples=32)
    assert sampled.samples == 32
    nothing = policy_distance(make_verifier("ngram"), draft[:0], None, p[:1], pi[:1], generator)
    assert (nothing.total_variation, nothing.kl, nothing.exact) == (0.0, 0.0, True)


def test_measuring_leaves_the_runs_generator_alone():
    """The distance draws from the generator it is given: the run passes its own other one."""
    draft, q, p, pi = _windowed_case(1)
    run = torch.Generator().manual_seed(9)
    before = run.get_state()
    policy_distance(make_verifier("ngram"), draft, q, p, pi, torch.Generator(), samples=16)
    assert torch.equal(run.get_state(), before)
