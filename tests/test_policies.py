"""Lossy verification policies accept exactly per their rules; fidelity metrics are right."""

from __future__ import annotations

import math

import pytest
import torch

from specdec_core.decoding.config import DecodeConfig
from specdec_core.errors import SpecdecError
from specdec_core.measurement.bench_entries import parse_variant
from specdec_core.measurement.fidelity import (
    common_prefix,
    mean_logprob,
    prefix_agreement,
    token_agreement,
)
from specdec_core.measurement.measure import Row, compared
from specdec_core.run.runner import run
from specdec_core.verifiers import VERIFIERS, make_verifier
from specdec_core.verifiers.lossless import LosslessVerifier
from specdec_core.verifiers.ngram import ngram_overlap, ngram_span
from specdec_core.verifiers.typical import entropy
from tests.tiny import prompt

LOSSY = ["threshold", "cosine", "typical", "ngram", "hybrid", "ensemble", "fly"]
V = 6


def dist(*rows: list[float]) -> torch.Tensor:
    """Rows of probabilities padded with zeros to V."""
    return torch.tensor([row + [0.0] * (V - len(row)) for row in rows])


def one_hot(*ids: int) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.tensor(ids), V).float()


def verdict(policy: str, draft: list[int], pi: torch.Tensor, q=None, **params):
    """Verify at T = 0: p is the one-hot argmax of π, as the decode loop builds it."""
    p = one_hot(*pi.argmax(-1).tolist())
    gen = torch.Generator().manual_seed(0)
    draft_t = torch.tensor(draft)
    verifier = make_verifier(policy, **params)
    extra = {"p_soft": pi} if verifier.needs_soft_p else {}  # as the decode loop passes it
    return verifier.verify(draft_t, q, p, gen, **extra)


# π for a 3-token draft [1, 2, 3] plus the bonus row; the target's argmax is 0, 2, 1, 4
PI = dist(
    [0.5, 0.3, 0.2],  # x1 = 1: π = 0.3, not the argmax
    [0.1, 0.2, 0.7],  # x2 = 2: π = 0.7, the argmax
    [0.2, 0.4, 0.3, 0.1],  # x3 = 3: π = 0.1
    [0.0, 0.0, 0.0, 0.0, 1.0],
)
DRAFT = [1, 2, 3]


@pytest.mark.parametrize("name", LOSSY)
def test_every_lossy_policy_is_registered_and_labelled_lossy(name):
    assert make_verifier(name).lossy


@pytest.mark.parametrize(
    "name,params",
    [
        ("threshold", {"tau": 0.0}),
        ("cosine", {"tau": 0.0}),
        ("typical", {"epsilon": 0.0}),
        ("ngram", {"tau": 0.0}),
        ("hybrid", {"ngram_tau": 0.0, "logit_tau": 0.0}),
        ("ensemble", {"w": 0.0}),
    ],
)
def test_zero_thresholds_accept_everything_drafted_then_the_bonus(name, params):
    result = verdict(name, DRAFT, PI, **params)
    assert (result.accepted, result.next_token) == (3, 4)


@pytest.mark.parametrize(
    "tau,accepted,next_token", [(0.3, 2, 1), (0.31, 0, 0), (0.1, 3, 4), (0.7, 0, 0)]
)
def test_threshold_accepts_while_target_probability_reaches_tau(tau, accepted, next_token):
    result = verdict("threshold", DRAFT, PI, tau=tau)
    assert (result.accepted, result.next_token) == (accepted, next_token)


def test_threshold_above_one_half_accepts_only_the_targets_greedy_tokens():
    pi = torch.cat([dist([0.6, 0.4]), PI[1:]])  # argmax 0 (0.6), 2 (0.7), 1 (0.4), 4
    result = verdict("threshold", [0, 2, 3], pi, tau=0.51)
    assert (result.accepted, result.next_token) == (2, 1)  # x3 = 3 is not the argmax
    assert verdict("threshold", [1, 2, 3], pi, tau=0.51).accepted == 0
    assert verdict("threshold", [0, 2, 3], pi, tau=0.71).accepted == 0


def test_cosine_compares_draft_and_target_distributions():
    pi = dist([0.3, 0.4, 0.3], [0.0, 1.0])
    q = dist([0.0, 1.0])  # one-hot on token 1: cos = π(1) / ‖π‖
    cos = 0.4 / math.sqrt(0.3**2 + 0.4**2 + 0.3**2)  # 0.686
    assert verdict("cosine", [1], pi, q=q, tau=cos - 1e-4).accepted == 1
    assert verdict("cosine", [1], pi, q=q, tau=cos + 1e-4).accepted == 0
    assert verdict("cosine", [1], pi, q=dist([0.3, 0.4, 0.3]), tau=1.0 - 1e-6).accepted == 1


def test_cosine_at_one_accepts_only_where_the_target_is_certain():
    pi = dist([0.0, 1.0], [0.5, 0.5], [1.0])
    assert verdict("cosine", [1, 0], pi, tau=1.0).accepted == 1


def test_typical_uses_the_entropy_bound_and_epsilon():
    uniform = [0.25] * 4  # H = ln 4: bound = min(ε, δ / 4)
    pi = dist(uniform, [0.97, 0.01, 0.01, 0.01], [1.0])
    assert torch.allclose(entropy(pi[:1]), torch.tensor([math.log(4)]))
    # δ / 4 = 0.25 at δ = 1: 0.25 > 0.25 is false (strict), at δ = 0.99 true
    assert verdict("typical", [3], pi, epsilon=1.0, delta=1.0).accepted == 0
    assert verdict("typical", [3], pi, epsilon=1.0, delta=0.99).accepted == 1
    # ε caps the bound: 0.25 > min(0.2, 100 / 4)
    assert verdict("typical", [3], pi, epsilon=0.2, delta=100.0).accepted == 1
    # confident row: bound = min(0.09, 0.3 · e^−H) = 0.09, so 0.01 is refused and 0.97 passes
    assert verdict("typical", [3, 1], pi).accepted == 1
    assert verdict("typical", [3, 0], pi).accepted == 2


def test_ngram_overlap_is_clipped_ngram_precision():
    assert ngram_overlap([1, 2, 3], [1, 2, 3], n=2) == 1.0
    assert ngram_overlap([1, 2, 3], [9, 1, 2], n=2) == 0.5  # (1,2) matches, (2,3) does not
    assert ngram_overlap([1, 1], [1, 2], n=1) == 0.5  # clipped: one 1 in the reference
    assert ngram_overlap([2, 1], [1, 2], n=1) == 1.0  # order-free within n
    assert ngram_overlap([2], [1], n=3) == 0.0  # n shrinks to the span length


def test_ngram_span_is_the_longest_prefix_reaching_tau():
    greedy = [5, 6, 7, 8]
    assert ngram_span([5, 6, 0, 0], greedy, n=1, tau=0.5) == 4
    assert ngram_span([5, 6, 0, 0], greedy, n=1, tau=0.6) == 3
    assert ngram_span([5, 6, 0, 0], greedy, n=2, tau=1.0) == 2
    assert ngram_span([0, 6, 7, 8], greedy, n=4, tau=1.0) == 0


def test_ngram_policy_compares_with_the_targets_greedy_continuation():
    # greedy over the drafted rows is [0, 2, 1]; the draft [1, 2, 3] shares unigram 2 and 1
    assert verdict("ngram", DRAFT, PI, n=1, tau=2 / 3).accepted == 3
    assert verdict("ngram", DRAFT, PI, n=1, tau=0.7).accepted == 0
    assert verdict("ngram", DRAFT, PI, n=1, tau=0.5).accepted == 3


def test_ngram_at_its_strictest_accepts_only_the_greedy_prefix():
    result = verdict("ngram", [0, 2, 3], PI, n=3, tau=1.0)
    assert (result.accepted, result.next_token) == (2, 1)


def test_hybrid_needs_both_the_ngram_screen_and_the_logits_check():
    # screen alone (n=1, τ=0.5) accepts all 3; the logits check at 0.2 stops at x3 (π = 0.1)
    assert verdict("hybrid", DRAFT, PI, n=1, ngram_tau=0.5, logit_tau=0.0).accepted == 3
    assert verdict("hybrid", DRAFT, PI, n=1, ngram_tau=0.5, logit_tau=0.2).accepted == 2
    # the logits check alone (0.0) passes everything; the strict screen refuses x1 != greedy
    assert verdict("hybrid", DRAFT, PI, n=3, ngram_tau=1.0, logit_tau=0.0).accepted == 0


def test_refused_token_is_replaced_by_the_targets_token_at_positive_temperature():
    p = dist([0.5, 0.5], [1.0])
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):  # refused x = 1: the residual p − one_hot(1) leaves only token 0
        result = make_verifier("threshold", tau=0.6).verify(torch.tensor([1]), None, p, gen)
        assert (result.accepted, result.next_token) == (0, 0)


def test_ensemble_with_weight_one_is_the_lossless_rule():
    torch.manual_seed(3)
    k = 4
    p = torch.softmax(torch.randn(k + 1, V) * 2, -1)
    q = torch.softmax(torch.randn(k, V) * 2, -1)
    lossless, ensemble = LosslessVerifier(), make_verifier("ensemble", w=1.0)
    assert not ensemble.lossy
    for seed in range(200):
        draft = torch.multinomial(q, 1, generator=torch.Generator().manual_seed(seed))[:, 0]
        a = lossless.verify(draft, q, p, torch.Generator().manual_seed(seed))
        b = ensemble.verify(draft, q, p, torch.Generator().manual_seed(seed))
        assert a == b


def test_ensemble_at_temperature_zero_accepts_a_wrong_draft_with_probability_one_minus_w():
    p = one_hot(0, 0)
    verifier = make_verifier("ensemble", w=0.7)
    gen = torch.Generator().manual_seed(0)
    results = [verifier.verify(torch.tensor([1]), None, p, gen) for _ in range(2000)]
    rate = sum(r.accepted for r in results) / len(results)
    assert abs(rate - 0.3) < 0.04
    assert {r.next_token for r in results if not r.accepted} == {0}


def test_unknown_policy_parameter_is_a_clear_error():
    with pytest.raises(SpecdecError, match="takes: tau"):
        make_verifier("threshold", epsilon=0.1)
    with pytest.raises(SpecdecError, match="0 <= w <= 1"):
        make_verifier("ensemble", w=2.0)
    with pytest.raises(SpecdecError, match="no parameters"):
        make_verifier("lossless", tau=0.1)
    assert set(LOSSY) | {"lossless"} == set(VERIFIERS)


STRICTEST = [
    ("threshold", {"tau": 1.0}),
    ("cosine", {"tau": 1.0}),
    ("typical", {"epsilon": 1.0, "delta": 1e9}),
    ("ngram", {"n": 8, "tau": 1.0}),
    ("hybrid", {"n": 8, "ngram_tau": 1.0, "logit_tau": 1.0}),
    ("ensemble", {"w": 1.0}),
]


@pytest.mark.parametrize("name,params", STRICTEST)
@pytest.mark.parametrize("method", ["classic", "ngram"])
def test_strictest_settings_reproduce_target_greedy_output(
    tiny_target, tiny_draft, name, params, method
):
    config = DecodeConfig(max_new_tokens=16, k=3, policy=name, policy_params=params)
    extra = tiny_draft if method == "classic" else None
    ar = run(tiny_target, "ar", prompt(6), DecodeConfig(max_new_tokens=16))
    lossy = run(tiny_target, method, prompt(6), config, extra)
    assert lossy.token_ids == ar.token_ids


def test_zero_threshold_accepts_every_draft_in_the_decode_loop(tiny_target, tiny_draft):
    config = DecodeConfig(max_new_tokens=16, k=3, policy="threshold", policy_params={"tau": 0})
    summary = run(tiny_target, "classic", prompt(6), config, tiny_draft)
    assert summary.lossy and summary.policy == "threshold"
    assert summary.accepted_per_position == summary.drafted_per_position


def test_threshold_at_greedy_scores_the_soft_target_not_the_one_hot(tiny_target, tiny_draft):
    """At T = 0 p is one-hot; a low τ must still accept non-argmax drafts (π = softmax)."""
    lossless = run(
        tiny_target, "classic", prompt(6), DecodeConfig(max_new_tokens=24, k=3), tiny_draft
    )
    config = DecodeConfig(max_new_tokens=24, k=3, policy="threshold", policy_params={"tau": 0.01})
    lossy = run(tiny_target, "classic", prompt(6), config, tiny_draft)
    assert lossy.mean_accept_length > lossless.mean_accept_length


def test_fidelity_agreements_on_a_hand_made_example():
    reference = [1, 2, 3, 4, 5]
    output = [1, 2, 9, 4, 5, 6]  # differs at index 2, re-aligns, one token longer
    assert common_prefix(output, reference) == 2
    assert prefix_agreement(output, reference) == 2 / 6
    assert token_agreement(output, reference) == 4 / 6
    assert prefix_agreement(reference, reference) == token_agreement(reference, reference) == 1
    assert prefix_agreement([], []) == 1.0
    row = compared(Row("ngram", tuple(output), 6, 3, 1.0, 0.0, 0.0), reference)
    assert row.identical_to_ar is False and row.prefix_agreement == 2 / 6


def test_mean_logprob_is_the_teacher_forced_target_logprob(tiny_target):
    model, ids, out = tiny_target.model, prompt(5), [7, 8, 9]
    expected = []
    with torch.no_grad():
        for t, token in enumerate(out):
            logits = model(input_ids=torch.tensor([ids + out[:t]])).logits[0, -1]
            expected.append(float(logits.log_softmax(-1)[token]))
    assert mean_logprob(model, ids, out) == pytest.approx(sum(expected) / 3, abs=1e-5)
    assert mean_logprob(model, ids, []) is None


def test_bench_method_entries_name_a_policy_and_its_parameters():
    base = DecodeConfig(policy="typical")
    assert parse_variant("ngram", base) == ("ngram", base)
    method, config = parse_variant("classic:hybrid:ngram_tau=0.4/logit_tau=0.1", base)
    assert (method, config.policy) == ("classic", "hybrid")
    assert config.policy_params == {"ngram_tau": 0.4, "logit_tau": 0.1}
    assert parse_variant("ngram:threshold", base)[1].policy_params == {}
    with pytest.raises(SpecdecError):
        parse_variant("ngram:threshold:tau=high", base)


def test_bench_reports_fidelity_per_policy_entry(tiny_target):
    from specdec_core.measurement.bench import run_bench

    config = DecodeConfig(max_new_tokens=12, k=3)
    methods = ["ngram", "ngram:threshold:tau=0", "ngram:ensemble:w=1"]
    result = run_bench(tiny_target, methods, ["w3 w4 w5 w6 w3 w4 w5"], config, specs={})
    ar, lossless, lossy = (result.methods[m] for m in ["ar", "ngram", "ngram:threshold:tau=0"])
    assert ar.prefix_agreement == ar.token_agreement == 1.0
    assert lossless.identical_to_ar == 1.0 and not lossless.lossy
    assert lossy.lossy and not result.methods["ngram:ensemble:w=1"].lossy
    assert lossless.mean_logprob == pytest.approx(ar.mean_logprob)
    assert {row.policy for row in result.rows} == {"lossless", "threshold", "ensemble"}


def test_cli_rejects_an_unknown_policy_parameter_before_loading_a_model(capsys):
    from specdec_core.cli import main

    argv = ["generate", "--prompt", "hi", "--policy", "typical", "--policy-param", "tau=0.1"]
    assert main(argv) == 2
    assert "takes: epsilon" in capsys.readouterr().err
