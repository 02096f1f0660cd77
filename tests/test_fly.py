"""FLy accepts a mismatch only behind its entropy gate and its deferred window, from the rows the
step already verified; otherwise it is the lossless rule."""

from __future__ import annotations

import pytest
import torch

from specdec_core.decoding.config import DecodeConfig
from specdec_core.errors import SpecdecError
from specdec_core.run.runner import run
from specdec_core.verifiers import make_verifier, policy_params
from specdec_core.verifiers.fly import top_entropy
from tests.tiny import prompt

V = 8
UNSURE = [0.4, 0.3, 0.2, 0.1]  # top-3 entropy ≈ 1.09 nats, well above θ = 0.3
SURE = [0.97, 0.01, 0.01, 0.01]  # top-3 entropy ≈ 0.12 nats, below θ = 0.3


def row(argmax: int, shape: list[float]) -> list[float]:
    """A distribution over V ids whose largest mass sits on `argmax`, the rest on 4, 5, 6."""
    others = [t for t in (4, 5, 6, 7) if t != argmax][: len(shape) - 1]
    out = [0.0] * V
    for token, mass in zip([argmax, *others], shape, strict=True):
        out[token] = mass
    return out


def greedy_verdict(draft: list[int], pi_rows: list[list[float]], **params):
    """FLy at T = 0: p is the one-hot argmax of π, π the soft rows (as the decode loop passes)."""
    pi = torch.tensor(pi_rows)
    p = torch.nn.functional.one_hot(pi.argmax(-1), V).float()
    verifier = make_verifier("fly", **params)
    generator = torch.Generator().manual_seed(0)
    return verifier.verify(torch.tensor(draft), None, p, generator, p_soft=pi)


# the target's greedy tokens are 0, 1, 2, 3, 0, 1 at rows 0..5 (row 5 scores the bonus)
ARGMAX = [0, 1, 2, 3, 0, 1]


def rows(unsure_at: int | None = None) -> list[list[float]]:
    return [row(g, UNSURE if i == unsure_at else SURE) for i, g in enumerate(ARGMAX)]


def test_defaults_are_the_published_configuration():
    assert policy_params("fly") == {"entropy_threshold": 0.3, "window": 6.0}
    assert make_verifier("fly").lossy


def test_top_entropy_reads_the_three_largest_probabilities_unrenormalised():
    pi = torch.tensor([UNSURE + [0.0] * 4])
    expected = -sum(x * torch.log(torch.tensor(x)) for x in UNSURE[:3])
    assert torch.allclose(top_entropy(pi), expected.reshape(1))


def test_accepts_a_mismatch_the_target_takes_back_at_an_unsure_position():
    """x_1 = 5 is not the target's 1, but π_1 is spread and x_2, x_3 are its greedy tokens."""
    draft = [0, 5, 2, 3, 0]
    verdict = greedy_verdict(draft, rows(unsure_at=1), window=2)
    assert (verdict.accepted, verdict.next_token) == (5, 1)  # all five, then the bonus


def test_refuses_a_mismatch_followed_by_rejections():
    """The token after the mismatch is refused too: an error, not another wording."""
    draft = [0, 5, 6, 3, 0]
    verdict = greedy_verdict(draft, rows(unsure_at=1), window=2)
    assert (verdict.accepted, verdict.next_token) == (1, 1)  # the target's own token at 1


def test_refuses_a_mismatch_where_the_target_is_sure():
    draft = [0, 5, 2, 3, 0]
    verdict = greedy_verdict(draft, rows(unsure_at=None), window=2)
    assert (verdict.accepted, verdict.next_token) == (1, 1)


def test_refuses_a_mismatch_the_target_gives_no_mass():
    draft = [0, 3, 2, 3, 0]  # id 3 has π_1(3) = 0 under UNSURE at argmax 1 (mass on 1, 4, 5, 6)
    verdict = greedy_verdict(draft, rows(unsure_at=1), window=2)
    assert verdict.accepted == 1


def test_the_tail_is_judged_strictly():
    """A mismatch at i needs rows i + 1 .. i + W among the drafted ones: i + W < k."""
    pi = rows(unsure_at=3)
    assert greedy_verdict([0, 1, 2, 5, 0], pi, window=1).accepted == 5  # 3 + 1 < 5
    assert greedy_verdict([0, 1, 2, 5, 0], pi, window=2).accepted == 3  # 3 + 2 = 5: refused
    assert greedy_verdict([0, 1, 2, 5], pi[:5], window=1).accepted == 3  # k = 4: refused


def test_the_bonus_row_is_never_read_by_the_window():
    draft = [0, 5, 2, 3, 0]
    pi = rows(unsure_at=1)
    pi[5] = row(7, SURE)
    verdict = greedy_verdict(draft, pi, window=2)
    assert (verdict.accepted, verdict.next_token) == (5, 7)


def test_entropy_threshold_decides_the_gate():
    draft = [0, 5, 2, 3, 0]
    assert greedy_verdict(draft, rows(1), window=2, entropy_threshold=1.0).accepted == 5
    assert greedy_verdict(draft, rows(1), window=2, entropy_threshold=1.2).accepted == 1


def test_with_nothing_to_judge_fly_is_the_lossless_rule_draws_included():
    generator = torch.Generator().manual_seed(3)
    q = torch.softmax(torch.randn(4, V, generator=generator), -1)
    p = torch.softmax(torch.randn(5, V, generator=generator), -1)
    fly, lossless = make_verifier("fly"), make_verifier("lossless")  # W = 6 > k = 4
    for seed in range(40):
        draft = torch.multinomial(q, 1, generator=generator).squeeze(-1)
        a = fly.verify(draft, q, p, torch.Generator().manual_seed(seed), p_soft=p)
        b = lossless.verify(draft, q, p, torch.Generator().manual_seed(seed))
        assert a == b


def test_at_positive_temperature_a_probabilistic_rejection_is_deferred():
    """p_1(x_1) = 0.05 under a deterministic draft: lossless keeps x_1 one time in twenty; FLy
    always does, since the drafted tokens around it are the target's certain ones."""
    p = torch.tensor([row(0, [1.0]), row(1, UNSURE), row(2, [1.0]), row(3, [1.0]), row(0, SURE)])
    p[1] = torch.tensor([0.0, 0.35, 0.0, 0.0, 0.3, 0.2, 0.1, 0.05])
    draft = torch.tensor([0, 7, 2, 3])
    fly = make_verifier("fly", window=2)
    kept_fly = kept_lossless = 0
    for seed in range(200):
        kept_fly += fly.verify(draft, None, p, torch.Generator().manual_seed(seed)).accepted == 4
        kept_lossless += (
            make_verifier("lossless").verify(draft, None, p, torch.Generator().manual_seed(seed))
        ).accepted >= 2
    assert kept_fly == 200
    assert kept_lossless < 30


@pytest.mark.parametrize(
    "params,message",
    [({"window": 1.5}, "whole window"), ({"window": -1}, "whole window"), ({"theta": 1}, "takes")],
)
def test_bad_parameters_are_clear_errors(params, message):
    with pytest.raises(SpecdecError, match=message):
        make_verifier("fly", **params)


def test_an_ungated_window_accepts_every_draft_in_the_decode_loop(tiny_target, tiny_draft):
    config = DecodeConfig(
        max_new_tokens=16, k=3, policy="fly", policy_params={"entropy_threshold": 0, "window": 0}
    )
    summary = run(tiny_target, "classic", prompt(6), config, tiny_draft)
    assert summary.lossy and summary.policy == "fly"
    assert summary.accepted_per_position == summary.drafted_per_position


def test_a_gate_nothing_passes_reproduces_target_greedy_output(tiny_target, tiny_draft):
    ar = run(tiny_target, "ar", prompt(6), DecodeConfig(max_new_tokens=16))
    config = DecodeConfig(
        max_new_tokens=16, k=4, policy="fly", policy_params={"entropy_threshold": 9, "window": 1}
    )
    lossy = run(tiny_target, "classic", prompt(6), config, tiny_draft)
    assert lossy.token_ids == ar.token_ids


def test_fly_defers_in_the_decode_loop_at_greedy(tiny_target, tiny_draft):
    """At T = 0 with a short window FLy accepts more than the lossless rule, on the same run."""
    lossless = run(
        tiny_target, "classic", prompt(6), DecodeConfig(max_new_tokens=32, k=6), tiny_draft
    )
    config = DecodeConfig(
        max_new_tokens=32, k=6, policy="fly", policy_params={"entropy_threshold": 0, "window": 1}
    )
    fly = run(tiny_target, "classic", prompt(6), config, tiny_draft)
    assert fly.mean_accept_length > lossless.mean_accept_length
