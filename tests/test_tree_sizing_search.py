"""The auto tree size's search (`tree_sizing.choose`) picks what the plain rule picks."""

from __future__ import annotations

import random

from specdec_core.drafters.tree_sizing import (
    MAX_DEPTH,
    MAX_TOKENS,
    MAX_TOPK,
    Costs,
    TreeShape,
    choose,
    tau_curve,
)


def plain_choice(costs: Costs, alpha1: float, depth=None, topk=None, total_tokens=None):
    """The rule written out: every shape, scored by expected τ over its modelled step time."""
    best = None
    commit = costs.head_seconds(2)
    for d in [depth] if depth else range(1, MAX_DEPTH + 1):
        for k in [topk] if topk else range(1, MAX_TOPK + 1):
            curve = tau_curve(d, k, alpha1)
            most = min(MAX_TOKENS, len(curve))
            for n in [total_tokens] if total_tokens else range(2, most + 1):
                tau = float(curve[min(n - 1, len(curve) - 1)])
                seconds = costs.target_seconds(n) + d * costs.head_seconds(k) + commit
                if best is None or tau / seconds > best[0] * (1 + 1e-3):
                    best = (tau / seconds, TreeShape(d, k, n), tau, seconds)
    return best


def random_costs(rng: random.Random) -> Costs:
    one = rng.uniform(0.005, 0.06)
    growth = rng.choice([0.0, 0.002, 0.01, 0.05]) * one
    target = {n: one + growth * (n - 1) * rng.uniform(0.8, 1.2) for n in (1, 2, 4, 8, 16, 32)}
    head = {k: rng.uniform(0.0005, 0.004) * (1 + 0.05 * k) for k in (1, 2, 4, 8)}
    return Costs(target=dict(sorted(target.items())), head=head)


def test_the_auto_size_search_picks_the_shape_the_plain_rule_picks_on_any_costs():
    rng = random.Random(7)
    for _ in range(40):
        costs = random_costs(rng)
        alpha1 = rng.uniform(0.1, 0.95)
        given = rng.choice([{}, {"depth": rng.randint(1, 6)}, {"topk": rng.randint(1, 8)},
                            {"total_tokens": rng.randint(2, 80)}])  # fmt: skip
        choice = choose(costs, alpha1, **given)
        _, shape, tau, seconds = plain_choice(costs, alpha1, **given)
        assert (choice.shape, choice.expected_tau, choice.step_seconds) == (shape, tau, seconds)
