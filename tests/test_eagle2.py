"""EAGLE-2 tree drafting on tiny random models: greedy identity, lossless sampling, compaction."""

from __future__ import annotations

import pytest
import torch

from specdec_core.decoding import forward_costs
from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.events import Finished, Started, Step
from specdec_core.decoding.forward_costs import Costs
from specdec_core.decoding.sampling import probs
from specdec_core.decoding.target import Target
from specdec_core.drafters import tree_sizing
from specdec_core.drafters.eagle2.drafter import Eagle2Drafter
from specdec_core.drafters.eagle2.growth import rerank
from specdec_core.drafters.eagle2.sizing import RESIZE_STEPS
from specdec_core.drafters.tree_sizing import TreeShape, choose, expected_tau
from specdec_core.loop.decode import generate, select_rows, verify_proposal
from specdec_core.run.runner import run
from specdec_core.verifiers import make_verifier
from tests.eagle_tiny import tiny_head
from tests.stats import chi_square_pvalue
from tests.test_tree import joint_first_two, sample_first_two
from tests.tiny import prompt, tiny_loaded

SHAPES = [(1, 4, 5), (3, 4, 10), (4, 3, 12), (2, 8, 20)]  # (depth, top-k, total tokens)


@pytest.fixture(scope="module")
def eagle3_target():
    return tiny_loaded(seed=3, layers=4)


def _config(shape: tuple[int, int, int] | None, **kwargs) -> DecodeConfig:
    depth, topk, tokens = shape or (None, None, None)
    return DecodeConfig(tree_depth=depth, tree_topk=topk, tree_tokens=tokens, **kwargs)


def _events(target, drafter, ids, config, generator=None):
    events = list(generate(target, drafter, ids, config, generator=generator))
    return events, events[-1].summary


@pytest.mark.parametrize("shape", [*SHAPES, None])
@pytest.mark.parametrize("offset", range(3))
def test_greedy_eagle2_output_equals_target_greedy(tiny_target, shape, offset):
    ids = prompt(length=4 + offset, offset=offset)
    config = _config(shape, max_new_tokens=40)
    reference = run(tiny_target, "ar", ids, config)
    drafter = Eagle2Drafter(tiny_head(tiny_target), tiny_target.model)
    events, summary = _events(tiny_target, drafter, ids, config)
    assert summary.token_ids == reference.token_ids
    steps = [e for e in events if isinstance(e, Step)]
    assert all(len(s.tree.accepted) == s.accepted for s in steps)
    if shape is not None:  # an auto size may change every RESIZE_STEPS steps
        assert all(len(s.tree.tokens) == shape[2] - 1 for s in steps)


@pytest.mark.parametrize("kind, draft_vocab", [("eagle1", 16), ("eagle3", 16)])
def test_greedy_eagle2_with_reduced_vocab_and_eagle3_heads(eagle3_target, kind, draft_vocab):
    ids = prompt(length=6)
    config = _config((3, 4, 10), max_new_tokens=30)
    reference = run(eagle3_target, "ar", ids, config)
    drafter = Eagle2Drafter(tiny_head(eagle3_target, kind, draft_vocab), eagle3_target.model)
    _, summary = _events(eagle3_target, drafter, ids, config)
    assert summary.token_ids == reference.token_ids
    assert drafter.feature_layers == ((2, 2, 1) if kind == "eagle3" else ())


def test_tree_is_sorted_parents_first_and_shaped_as_asked(tiny_target):
    ids = prompt(length=6)
    drafter = Eagle2Drafter(tiny_head(tiny_target), tiny_target.model)
    drafter.begin(ids, Target(tiny_target.model).prefill(ids[:-1]))
    for depth, topk, tokens in SHAPES:
        config = _config((depth, topk, tokens))
        proposal = drafter.propose(ids, config, torch.Generator())
        assert len(proposal.tokens) == tokens - 1
        assert all(parent < node for node, parent in enumerate(proposal.parents))
        levels = []
        for parent in proposal.parents:
            levels.append(levels[parent] + 1 if parent >= 0 else 1)
        assert max(levels) <= depth
        for node, parent in enumerate(proposal.parents):  # children never outscore parents
            assert parent < 0 or proposal.scores[node] <= proposal.scores[parent] + 1e-6
        siblings = {}
        for node, parent in enumerate(proposal.parents):
            siblings.setdefault(parent, []).append(proposal.tokens[node])
        assert all(len(set(group)) == len(group) for group in siblings.values())


def test_rerank_keeps_parents_of_ties():
    tokens = torch.tensor([5, 6, 7, 8])
    scores = torch.tensor([-1.0, -2.0, -1.0, -1.0])  # nodes 2 and 3: children of 0 with logp 0
    parents = torch.tensor([-1, -1, 0, 2])
    chosen, tree_parents, _ = rerank(tokens, scores, parents, 3)
    assert chosen == [5, 7, 8] and tree_parents == (-1, 0, 1)


@pytest.mark.slow
@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_eagle2_sampling_follows_target_distribution(tiny_target, temperature, top_p):
    ids = prompt(length=4)
    config = _config((2, 8, 20), max_new_tokens=2, temperature=temperature, top_p=top_p)
    drafter = Eagle2Drafter(tiny_head(tiny_target), tiny_target.model)
    samples = 3000
    drawn, accepted = sample_first_two(tiny_target, drafter, ids, config, samples, seed=13)
    expected = joint_first_two(tiny_target.model, ids, temperature, top_p)
    assert chi_square_pvalue(drawn, expected) > 1e-3
    assert 0.1 * samples < accepted  # the tree was accepted from, not only the residual


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("kind", ["eagle1", "eagle3"])
def test_head_and_target_caches_equal_a_fresh_prefill_after_compaction(
    eagle3_target, temperature, kind
):
    target = eagle3_target
    head = tiny_head(target, kind, seed=7)  # a random head that does get drafts accepted
    config = _config((3, 12, 30), temperature=temperature)  # wide: random heads are weak
    generator = torch.Generator().manual_seed(3)
    ids = prompt(length=6)
    drafter = Eagle2Drafter(head, target.model)
    runner = Target(target.model, drafter.feature_layers)
    drafter.begin(ids, runner.prefill(ids[:-1]))
    verifier = make_verifier("lossless")
    accepted_total = 0
    for _ in range(10):  # the decode loop's step, by hand, to reach both caches
        proposal = drafter.propose(ids, config, generator)
        start = runner.length
        out = runner.forward([ids[-1], *proposal.tokens], proposal.parents)
        p = probs(out.logits, config.temperature, config.top_p)
        path, token = verify_proposal(proposal, p, verifier, generator)
        rows = [0, *(node + 1 for node in path)]
        runner.keep(start, rows)
        ids = [*ids, *(proposal.tokens[node] for node in path), token]
        drafter.commit(ids, len(path), select_rows(out, rows))
        accepted_total += len(path)
    assert accepted_total > 0
    fresh_runner = Target(target.model, drafter.feature_layers)
    fresh = Eagle2Drafter(head, target.model)
    fresh.begin(ids, fresh_runner.prefill(ids[:-1]))
    for cache, reference in ((runner.cache, fresh_runner.cache), (drafter.cache, fresh.cache)):
        assert cache.get_seq_length() == reference.get_seq_length() == len(ids) - 1
        for ours, theirs in zip(cache.layers, reference.layers, strict=True):
            torch.testing.assert_close(ours.keys, theirs.keys, atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(ours.values, theirs.values, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(drafter.root[1], fresh.root[1], atol=1e-4, rtol=1e-4)


def test_started_event_and_summary_carry_the_chosen_tree_size(tiny_target):
    drafter = Eagle2Drafter(tiny_head(tiny_target), tiny_target.model)
    events, summary = _events(tiny_target, drafter, prompt(), DecodeConfig(max_new_tokens=8))
    started = events[0]
    assert isinstance(started, Started) and isinstance(events[-1], Finished)
    shape = drafter.sizer.choice(DecodeConfig()).shape
    for config in (started.config, summary.config):
        assert (config["tree_depth"], config["tree_topk"], config["tree_tokens"]) == (
            shape.depth,
            shape.topk,
            shape.total_tokens,
        )
        assert config["tree_sizing"].startswith("auto:")


def test_sizing_gives_eagle_sized_trees_when_verification_is_free():
    flat = Costs(target={1: 0.015, 64: 0.0155}, head={1: 0.0008, 10: 0.0009})
    choice = choose(flat, alpha1=0.75)
    assert choice.shape.total_tokens == 60 and choice.shape.topk >= 6 and choice.shape.depth >= 5


def test_sizing_gives_small_trees_on_a_cpu():
    cpu = Costs(  # SmolLM2-135M fp32 on a 2-core CPU (docs/benchmarks.md)
        target={1: 0.040, 4: 0.055, 8: 0.061, 16: 0.070, 32: 0.090, 64: 0.130},
        head={1: 0.0021, 4: 0.0036, 10: 0.0066},
    )
    choice = choose(cpu, alpha1=0.6)
    assert choice.shape.total_tokens <= 16
    assert choose(cpu, 0.6, depth=3).shape.depth == 3
    assert choose(cpu, 0.6, total_tokens=30).shape.total_tokens == 30


def test_a_burst_of_load_slows_one_timing_round_not_the_sizes_it_falls_on():
    """A simulated clock: every run takes 1 ms, 10 ms while a burst lasts (the first 90 ms).
    Rounds that go through all sizes in turn leave each size one fast run."""
    now = [0.0]

    def clock() -> float:
        return now[0]

    def run() -> None:
        now[0] += 0.010 if now[0] < 0.090 else 0.001

    timed = forward_costs.fastest({n: run for n in (1, 4, 8, 16, 32)}, repeats=3, clock=clock)
    assert timed == pytest.approx(dict.fromkeys((1, 4, 8, 16, 32), 0.001))


def test_measured_costs_never_fall_with_size():
    """A small forward timed above a larger one was slowed by something else."""
    measured = {1: 0.021, 4: 0.035, 8: 0.024, 16: 0.040, 32: 0.039, 60: 0.060}
    fixed = forward_costs.monotone(measured)
    assert fixed == {1: 0.021, 4: 0.024, 8: 0.024, 16: 0.039, 32: 0.039, 60: 0.060}
    cpu = Costs(target=fixed, head={1: 0.0007, 10: 0.0009})
    assert choose(cpu, alpha1=0.6).shape.total_tokens <= 16


def test_expected_tau_grows_with_the_tree():
    small, large = TreeShape(3, 4, 8), TreeShape(6, 10, 60)
    assert 1.0 < expected_tau(small) < expected_tau(large) < 7.0


def test_auto_size_follows_the_measured_acceptance(tiny_target):
    """After RESIZE_STEPS steps the prior α₁ gives way to the measured top-1 acceptance."""
    drafter = Eagle2Drafter(tiny_head(tiny_target), tiny_target.model)
    config = DecodeConfig(max_new_tokens=60)
    _, summary = _events(tiny_target, drafter, prompt(), config)
    assert summary.steps >= RESIZE_STEPS
    alpha1 = drafter.sizer.acceptance.acceptance(drafter.sizer.acceptance_key(config))
    assert alpha1 != tree_sizing.ALPHA1
    choice = drafter.sizer.choice(config)
    assert choice.shape == choose(choice.costs, alpha1).shape


def test_a_one_wide_tree_drafts_what_the_eagle_chain_drafts(tiny_target):
    """top-k 1: the tree is EAGLE-1's chain, so both accept the same counts at every step."""
    from specdec_core.drafters.eagle import EagleDrafter

    head = tiny_head(tiny_target, seed=8)  # a random head whose top-1 is sometimes right
    ids = prompt(length=6, offset=1)
    chain_config = DecodeConfig(max_new_tokens=30, k=3)
    tree_config = _config((3, 1, 4), max_new_tokens=30)
    layers = tiny_target.model.config.num_hidden_layers
    chain, chain_summary = _events(tiny_target, EagleDrafter(head, layers), ids, chain_config)
    tree, tree_summary = _events(
        tiny_target, Eagle2Drafter(head, tiny_target.model), ids, tree_config
    )
    assert chain_summary.token_ids == tree_summary.token_ids
    accepted = [[e.accepted for e in events if isinstance(e, Step)] for events in (chain, tree)]
    assert accepted[0] == accepted[1] and sum(accepted[0]) > 0


def test_head_step_timing_runs_the_dummy_prefix_once(tiny_target, monkeypatch):
    """`--tree-tokens auto` times the beam step alone, not the 128-row prefix under it."""
    from specdec_core.decoding import kv_cache

    drafter = Eagle2Drafter(tiny_head(tiny_target), tiny_target.model)
    rows = []
    step = drafter.head.step
    monkeypatch.setattr(
        drafter.head, "step", lambda f, t, *a: rows.append(t.shape[-1]) or step(f, t, *a)
    )
    for k in (1, 4, 4):
        drafter.sizer.time_head_step(k)
        assert kv_cache.cache_length(drafter.sizer.timing_cache) == 128
    assert rows == [128, 1, 4, 4]


def test_a_given_tree_larger_than_its_beam_is_capped_and_says_so(tiny_target):
    drafter = Eagle2Drafter(tiny_head(tiny_target), tiny_target.model)
    config = _config((2, 4, 24))  # depth 2 x top-k 4 yields 4 + 16 = 20 nodes
    choice = drafter.sizer.choice(config)
    assert choice.shape == TreeShape(2, 4, 21) and "capped at 21" in choice.reason
    ids = prompt(length=6)
    drafter.begin(ids, Target(tiny_target.model).prefill(ids[:-1]))
    assert len(drafter.propose(ids, config, torch.Generator()).tokens) == 20


def test_at_t_above_zero_every_expanded_node_has_topk_draws_from_its_own_q(tiny_target):
    drafter = Eagle2Drafter(tiny_head(tiny_target, seed=8), tiny_target.model)
    ids = prompt(length=6)
    runner = Target(tiny_target.model, drafter.feature_layers)
    drafter.begin(ids, runner.prefill(ids[:-1]))
    config = _config((3, 4, 40), temperature=1.0)
    generator = torch.Generator().manual_seed(2)
    repeated = 0
    for _ in range(20):
        proposal = drafter.propose(ids, config, generator)
        draws = proposal.draws
        assert draws is not None and proposal.q is not None
        expanded = {-1} | {proposal.parents[node] for node in range(len(proposal.tokens))}
        per_parent = {p: [n for n in draws if proposal.parents[n] == p] for p in expanded}
        assert all(len(nodes) == 4 for nodes in per_parent.values())  # top-k draws each
        assert len(expanded) <= 1 + 4 + 4  # the root, then a beam of 4 per level
        assert sorted(set(draws)) == list(range(len(proposal.tokens)))  # every node was drawn
        assert all(parent < node for node, parent in enumerate(proposal.parents))
        for node, token in enumerate(proposal.tokens):
            assert proposal.q[node, token] > 0
            siblings = [n for n in draws if proposal.parents[n] == proposal.parents[node]]
            assert all(torch.equal(proposal.q[n], proposal.q[node]) for n in siblings)
        torch.testing.assert_close(proposal.q.sum(-1), torch.ones(len(proposal.tokens)))
        repeated += len(draws) > len(proposal.tokens)
    assert drafter.cache.get_seq_length() == len(ids) - 1  # drafting rows truncated again
    assert repeated > 0
