"""The distance at the first position of a tree drafted by sampling: the estimate from redrawn
root children covers the exact value enumerated over every draw of a tiny vocabulary, the
lossless rule is at distance 0, and a wrong drawing scheme is told apart."""

from __future__ import annotations

import itertools
import math

import torch

from specdec_core.decoding.config import DecodeConfig
from specdec_core.measurement.fidelity import PathCall, divergence, residual
from specdec_core.measurement.measure import run_distance
from specdec_core.measurement.sampled_tree_distance import sampled_tree_distance
from specdec_core.verifiers import make_verifier
from tests.eagle_tiny import tiny_head

V = 5
DRAWS = 3  # the root's i.i.d. draws (top-k)


def distributions(seed: int, count: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.softmax(1.5 * torch.randn(count, V, generator=generator), -1)


def sampled_tree(seed: int = 0, depth: int = 2):
    """(calls, q0, p0): root children 0 and 1 drawn from q0, a merged-in child 4 (one-hot root
    row); at depth 2 child 0 has children 2 and 3, child 1 has 0, child 4 has 1."""
    q0, p0, *below = distributions(seed, 12)
    one_hot_4 = torch.nn.functional.one_hot(torch.tensor(4), V).float()
    shape = [(0, 2), (0, 3), (1, 0), (4, 1)] if depth == 2 else [(0,), (1,), (4,)]
    calls = []
    for i, tokens in enumerate(shape):
        root_row = q0 if tokens[0] != 4 else one_hot_4
        q = torch.stack([root_row, *below[2 * i : 2 * i + len(tokens) - 1]])
        p = torch.stack([p0, *below[2 * i + 1 : 2 * i + len(tokens) + 1]])
        calls.append(PathCall(torch.tensor(tokens), q, p, p))  # T = 1: π = p
    return calls, q0, p0


def children(draws: tuple[int, ...], added: tuple[int, ...] = (4,)) -> list[int]:
    drawn = list(dict.fromkeys(draws))
    return drawn + [t for t in added if t not in drawn]


def draw_weights(q0: torch.Tensor, replacement: bool):
    """Every ordered tuple of DRAWS root draws and its probability under the scheme."""
    for draws in itertools.product(range(V), repeat=DRAWS):
        if replacement:
            yield draws, math.prod(float(q0[x]) for x in draws)
        elif len(set(draws)) == DRAWS:  # drawn one by one, each from what is left
            weight, left = 1.0, 1.0
            for x in draws:
                weight, left = weight * float(q0[x]) / left, left - float(q0[x])
            yield draws, weight


def threshold_enumerated(calls, q0, p0, tau: float, replacement: bool = True) -> torch.Tensor:
    """The exact first-token distribution of `threshold` on the tree, every root draw enumerated:
    a child's accepted length is its longest approved path prefix (π_i(x_i) ≥ τ along it; a
    child the tree does not hold is judged at the root row alone), the first longest wins."""
    paths: dict[int, list[torch.Tensor]] = {}
    for call in calls:
        pi = call.p_soft if call.p_soft is not None else call.p
        approved = pi[torch.arange(len(call.draft)), call.draft] >= tau
        run = int(approved.long().cumprod(0).sum())
        paths.setdefault(int(call.draft[0]), []).append(run)
    emitted = torch.zeros(V, dtype=torch.float64)
    fallback = residual(p0, q0).double()
    for draws, weight in draw_weights(q0, replacement):
        lengths = [max(paths.get(x, [int(p0[x] >= tau)])) for x in children(draws)]
        best = max(lengths)
        if best:
            emitted[children(draws)[lengths.index(best)]] += weight
        else:
            emitted += weight * fallback
    return emitted / emitted.sum()


def ensemble_enumerated(calls, q0, p0, w: float) -> torch.Tensor:
    """`ensemble` on a depth-1 tree: one-token paths verified with the same uniform u, each
    child accepted iff u < min(1, m(x) / q(x)), m = w·p + (1 − w)·q: the first accepted wins."""
    mixture = w * p0 + (1 - w) * q0
    rows = {int(call.draft[0]): call.q[0] for call in calls}
    emitted = torch.zeros(V, dtype=torch.float64)
    for draws, weight in draw_weights(q0, True):
        reached = 0.0  # P(u below the bar of an earlier child)
        for x in children(draws):
            q_x = float((q0 if x in draws else rows[x])[x])  # a drawn child's row is q0
            bar = min(1.0, float(mixture[x]) / q_x)
            emitted[x] += weight * max(0.0, bar - reached)
            reached = max(reached, bar)
        emitted += weight * (1.0 - reached) * residual(mixture, q0).double()
    return emitted


def assert_covers(estimate, exact: torch.Tensor, p0: torch.Tensor) -> None:
    exact_tv, exact_kl = divergence(exact, p0)
    assert exact_tv > 0.05 and estimate.total_variation_se > 0  # something to estimate
    assert abs(estimate.total_variation - exact_tv) <= 4 * estimate.total_variation_se + 0.01
    assert abs(estimate.kl - exact_kl) <= 4 * estimate.kl_se + 0.01


def test_a_threshold_estimate_covers_the_enumerated_distance():
    calls, q0, p0 = sampled_tree()
    for tau in (0.1, 0.25):
        policy = make_verifier("threshold", tau=tau)
        generator = torch.Generator().manual_seed(1)
        estimate = sampled_tree_distance(policy, calls, DRAWS, generator, samples=3000)
        assert estimate.samples >= 3000 and not estimate.exact
        assert_covers(estimate, threshold_enumerated(calls, q0, p0, tau), p0)


def test_a_child_with_a_longer_approved_path_is_emitted_before_an_earlier_one():
    """Child 1's path is approved to depth 2, child 0's only at the root: whenever 1 is drawn it
    is emitted. Judging every child at the root alone (first approved wins) is excluded."""
    q0 = torch.tensor([0.4, 0.3, 0.1, 0.1, 0.1])
    p0 = torch.tensor([0.15, 0.15, 0.3, 0.3, 0.1])
    refuses = torch.tensor([0.05, 0.05, 0.05, 0.05, 0.8])  # 2 and 3 below τ
    approves = torch.tensor([0.6, 0.1, 0.1, 0.1, 0.1])  # 0 above it
    calls = [
        PathCall(torch.tensor([x, y]), torch.stack([q0, q0]), torch.stack([p0, row, p0]), None)
        for (x, y), row in [((0, 2), refuses), ((0, 3), refuses), ((1, 0), approves)]
    ]
    policy = make_verifier("threshold", tau=0.12)
    estimate = sampled_tree_distance(policy, calls, DRAWS, torch.Generator().manual_seed(2))
    exact = threshold_enumerated(calls, q0, p0, 0.12)
    assert_covers(estimate, exact, p0)
    at_root = [PathCall(c.draft[:1], c.q[:1], c.p[:2], None) for c in calls]
    root_tv, _ = divergence(threshold_enumerated(at_root, q0, p0, 0.12), p0)
    assert abs(estimate.total_variation - root_tv) > 6 * estimate.total_variation_se + 0.01


def test_drawing_without_replacement_is_told_apart():
    """Mutated: the root's children drawn without replacement; the estimate must exclude it."""
    calls, q0, p0 = sampled_tree()
    policy = make_verifier("threshold", tau=0.1)
    estimate = sampled_tree_distance(policy, calls, DRAWS, torch.Generator(), samples=3000)
    wrong_tv, _ = divergence(threshold_enumerated(calls, q0, p0, 0.1, replacement=False), p0)
    assert abs(estimate.total_variation - wrong_tv) > 6 * estimate.total_variation_se + 0.01


def test_a_sampling_rule_estimate_covers_the_enumerated_distance():
    """`ensemble` draws its own uniforms: every path of every repetition is verified."""
    calls, q0, p0 = sampled_tree(seed=2, depth=1)
    policy = make_verifier("ensemble", w=0.3)
    estimate = sampled_tree_distance(policy, calls, DRAWS, torch.Generator().manual_seed(3), 3000)
    assert_covers(estimate, ensemble_enumerated(calls, q0, p0, 0.3), p0)


def test_fly_that_defers_nothing_is_the_chain_rule_path_by_path():
    """θ above any entropy: FLy is the native rule, u < p(x) / q(x) with one u for every path,
    which is `ensemble` at w = 1 verified path by path (not lossless on a tree)."""
    calls, q0, p0 = sampled_tree(seed=4, depth=1)
    policy = make_verifier("fly", entropy_threshold=100.0, window=0)
    estimate = sampled_tree_distance(policy, calls, DRAWS, torch.Generator().manual_seed(5), 3000)
    assert_covers(estimate, ensemble_enumerated(calls, q0, p0, 1.0), p0)


def test_the_lossless_rule_on_a_sampled_tree_emits_the_target():
    for seed in range(3):
        calls, q0, p0 = sampled_tree(seed)
        generator = torch.Generator().manual_seed(seed)
        lossless = sampled_tree_distance(make_verifier("lossless"), calls, DRAWS, generator, 4000)
        assert lossless.total_variation <= 3 * lossless.total_variation_se + 0.01
        assert lossless.total_variation < 0.04  # 4000 draws over 5 tokens: noise only
        lossy = sampled_tree_distance(make_verifier("ensemble", w=0.3), calls, DRAWS, generator)
        assert lossy.total_variation > lossless.total_variation + 4 * lossy.total_variation_se


def test_a_sampled_eagle2_tree_is_measured_at_temperature_1(tiny_target):
    ids = list(range(3, 15))
    config = DecodeConfig(
        max_new_tokens=8, temperature=1.0, policy="threshold", policy_params={"tau": 0.01},
        tree_depth=3, tree_topk=3, tree_tokens=12,
    )  # fmt: skip
    distance = run_distance("eagle2", tiny_target, ids, config, tiny_head(tiny_target), "12/3/3")
    assert distance.unmeasured_steps == 0
    assert distance.tokens > 0 and distance.estimated_tokens == distance.tokens
    assert 0.0 < distance.total_variation <= 1.0 and distance.total_variation_se > 0
    assert "estimated by sampling" in distance.note()
