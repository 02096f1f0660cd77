"""What tree sizing keeps between runs belongs to an owner: forward costs are measured once per
owner and model, acceptance is learned per owner and head, and a fresh owner starts over."""

from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.forward_costs import HEAD_ROWS, Costs, ForwardCosts
from specdec_core.drafters.eagle2.sizing import RESIZE_STEPS, TreeSizer
from specdec_core.drafters.tree_sizing import ALPHA1, AcceptanceEstimates, choose
from specdec_core.run.runner import run
from tests.eagle_tiny import tiny_head
from tests.tiny import prompt

KEY = ("head", "eagle1", 8192, "torch.float32", 0.0, 1.0)


def test_a_fresh_acceptance_owner_starts_every_head_from_the_prior():
    learned = AcceptanceEstimates()
    assert learned.acceptance(KEY) == ALPHA1
    assert learned.observe(KEY, trials=40, hits=40) > ALPHA1
    assert learned.acceptance(KEY) > ALPHA1
    assert learned.acceptance(("another head",)) == ALPHA1
    assert AcceptanceEstimates().acceptance(KEY) == ALPHA1  # nothing carries over


def test_acceptance_follows_recent_levels_once_its_memory_is_full():
    estimates = AcceptanceEstimates()
    estimates.observe(KEY, trials=10_000, hits=0)  # a long bad run is remembered as 128 trials
    assert estimates.acceptance(KEY) < 0.01
    after = estimates.observe(KEY, trials=128, hits=128)
    assert 0.45 < after < 0.55  # as much weight as the memory holds


def test_the_acceptance_an_owner_learned_sizes_the_tree_it_chooses():
    costs = Costs(target={1: 0.040, 16: 0.070, 64: 0.130}, head={1: 0.002, 10: 0.0066})
    good, poor = AcceptanceEstimates(), AcceptanceEstimates()
    good.observe(KEY, trials=128, hits=120)
    poor.observe(KEY, trials=128, hits=10)
    big = choose(costs, good.acceptance(KEY)).shape
    small = choose(costs, poor.acceptance(KEY)).shape
    assert big.total_tokens > small.total_tokens


def test_head_costs_are_measured_once_per_owner_and_again_by_a_fresh_owner():
    calls = []
    costs = ForwardCosts()
    first = costs.head(KEY, calls.append)
    measured = len(calls)
    assert sorted(first) == sorted(HEAD_ROWS) and measured >= 2 * len(HEAD_ROWS)
    assert costs.head(KEY, calls.append) is first and len(calls) == measured
    ForwardCosts().head(KEY, calls.append)
    assert len(calls) == 2 * measured


def test_target_costs_are_measured_once_per_owner_and_model(tiny_target):
    costs = ForwardCosts()
    measured = costs.target(tiny_target.model)
    seconds = [measured[n] for n in sorted(measured)]
    assert min(measured) == 1 and seconds == sorted(seconds)  # never falls with size
    assert costs.target(tiny_target.model) is measured
    assert ForwardCosts().target(tiny_target.model) is not measured


def test_runs_with_separate_owners_share_no_measurement(tiny_target):
    """Each run measures into and learns in its own owners; the second run starts from the
    prior, not from what the first one learned."""
    head = tiny_head(tiny_target)
    config = DecodeConfig(max_new_tokens=60)
    owners = [(ForwardCosts(), AcceptanceEstimates()) for _ in range(2)]
    summaries = [
        run(tiny_target, "eagle2", prompt(), config, head, costs=costs, acceptance=acceptance)
        for costs, acceptance in owners
    ]
    sizer = TreeSizer(head, tiny_target.model, ForwardCosts(), AcceptanceEstimates())
    for (costs, acceptance), summary in zip(owners, summaries, strict=True):
        assert summary.steps >= RESIZE_STEPS
        assert f"top-1 acceptance {ALPHA1:.2f}" in summary.config["tree_sizing"]
        assert acceptance.acceptance(sizer.acceptance_key(config)) != ALPHA1  # learned here
        calls = []
        costs.head(sizer.head_key(), calls.append)
        assert calls == []  # measured by its own run


def test_runs_sharing_owners_carry_what_the_first_learned_into_the_second(tiny_target):
    head = tiny_head(tiny_target)
    config = DecodeConfig(max_new_tokens=60)
    costs, acceptance = ForwardCosts(), AcceptanceEstimates()
    first = run(tiny_target, "eagle2", prompt(), config, head, costs=costs, acceptance=acceptance)
    sizer = TreeSizer(head, tiny_target.model, costs, acceptance)
    learned = acceptance.acceptance(sizer.acceptance_key(config))
    second = run(tiny_target, "eagle2", prompt(), config, head, costs=costs, acceptance=acceptance)
    assert f"top-1 acceptance {ALPHA1:.2f}" in first.config["tree_sizing"]
    assert f"top-1 acceptance {learned:.2f}" in second.config["tree_sizing"]
    assert f"{learned:.2f}" != f"{ALPHA1:.2f}"
