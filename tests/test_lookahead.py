"""Lookahead decoding: the Jacobi window, its n-gram pool, the tree it proposes, losslessness."""

from __future__ import annotations

import pytest
import torch

import specdec_core.loop.decode as decode_module
from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.events import Finished, Step
from specdec_core.decoding.sampling import sample
from specdec_core.decoding.target import Target, TargetOutput
from specdec_core.drafters.lookahead import (
    JacobiWindow,
    LookaheadDrafter,
    LookaheadSettings,
    NgramPool,
    lookahead_tree,
)
from specdec_core.errors import SpecdecError
from specdec_core.loop.decode import generate
from specdec_core.run.runner import run
from specdec_core.verifiers.greedy import verify_greedy
from tests.stats import chi_square_pvalue, sample_first_two_tokens, target_marginals
from tests.tiny import VOCAB, prompt, tiny_loaded, tiny_model

EOS = 2
SETTINGS = [
    LookaheadSettings(),
    LookaheadSettings(window=5, ngram_size=4, candidates=4),
    LookaheadSettings(window=3, ngram_size=2, candidates=2),
    LookaheadSettings(window=2, ngram_size=5, candidates=1, prompt_pool=True),
]
REPETITIVE = [1] + [4, 9, 13, 6, 21] * 4  # the same five words four times


class Recording(LookaheadDrafter):
    """A lookahead drafter that keeps every proposal it made."""

    def __init__(self, settings: LookaheadSettings) -> None:
        super().__init__(settings, eos_ids={EOS})
        self.proposals = []

    def propose(self, ids, config, generator):
        proposal = super().propose(ids, config, generator)
        self.proposals.append(proposal)
        return proposal


def _generate(target, drafter, ids, config, generator=None):
    steps, summary = [], None
    for event in generate(target, drafter, ids, config, generator=generator):
        steps += [event] if isinstance(event, Step) else []
        summary = event.summary if isinstance(event, Finished) else summary
    return steps, summary


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: f"W{s.window}N{s.ngram_size}")
@pytest.mark.parametrize("offset", range(3))
def test_greedy_lookahead_output_equals_target_greedy(tiny_target, settings, offset):
    ids = prompt(length=4 + offset, offset=offset)
    config = DecodeConfig(max_new_tokens=40)
    reference = run(tiny_target, "ar", ids, config)
    steps, summary = _generate(tiny_target, LookaheadDrafter(settings, {EOS}), ids, config)
    assert summary.token_ids == reference.token_ids
    assert all(step.tree is not None and len(step.tree.accepted) == step.accepted for step in steps)


def test_a_repetitive_prompt_is_continued_from_the_pool(tiny_target):
    config = DecodeConfig(max_new_tokens=40)
    reference = run(tiny_target, "ar", REPETITIVE, config)
    runs = {}
    for candidates in (0, 3):
        settings = LookaheadSettings(window=4, ngram_size=3, candidates=candidates)
        drafter = LookaheadDrafter(settings, {EOS})
        _, summary = _generate(tiny_target, drafter, REPETITIVE, config)
        assert summary.token_ids == reference.token_ids
        runs[candidates] = summary
    with_pool = runs[3]
    assert sum(with_pool.accepted_per_position) > 0 and with_pool.steps < reference.steps
    assert with_pool.steps < runs[0].steps  # the verification branch adds accepted drafts


def test_the_pool_fills_from_the_jacobi_trajectories():
    window = JacobiWindow([10, 11, 12, 13], levels=3)  # W 3, N 4: W + N - 3 guesses to start
    pool = NgramPool(size=4, per_key=2)
    assert window.width == 5 and not window.full
    for new in ([20, 21, 22, 23, 24], [30, 31, 32, 33]):  # two steps fill levels 1 and 2
        assert window.grams(5, new) == []
        window.advance(new)
    assert window.oldest == [12, 13] and window.upper == [[22, 23, 24], [31, 32, 33]]
    assert window.full and window.width == 3
    # column i: the oldest level's guess (the pending token 5 for column 0), then the same
    # column up the levels, then the new guess the target made at its top
    grams = window.grams(5, [40, 41, 42])
    assert grams == [(5, 22, 31, 40), (12, 23, 32, 41), (13, 24, 33, 42)]
    for gram in grams:
        pool.add(gram)
    window.advance([40, 41, 42])
    assert window.oldest == [23, 24] and window.upper == [[31, 32, 33], [40, 41, 42]]
    assert pool.candidates(12) == [(23, 32, 41)] and pool.candidates(7) == []


def test_the_pool_keeps_the_most_recent_candidates_per_key():
    pool = NgramPool(size=3, per_key=2)
    for gram in ([5, 1, 2], [5, 3, 4], [5, 1, 2], [5, 6, 7], [9, 1]):  # [9, 1] is too short
        pool.add(gram)
    assert pool.candidates(5) == [(6, 7), (1, 2)]  # (3, 4) was least recently added
    assert pool.candidates(9) == []
    pool.add_sequence([8, 5, 6, 7, 8], start=3)  # n-grams ending at index 3 or later
    assert pool.candidates(5) == [(6, 7), (1, 2)] and pool.candidates(6) == [(7, 8)]
    assert pool.candidates(8) == []


def test_observe_reads_each_column_top_row_into_the_pool(tiny_target):
    """Constructed target rows: the drafter moves its window and pools what they say."""
    drafter = LookaheadDrafter(LookaheadSettings(window=3, ngram_size=3, candidates=2))
    ids = [1, 5, 6, 7]
    drafter.begin(ids, None)
    generator = torch.Generator().manual_seed(0)
    config = DecodeConfig()
    drafter.propose(ids, config, generator)
    drafter.window = JacobiWindow([10, 11, 12], levels=2)  # a known window, still filling
    for step, guesses in enumerate(([20, 21, 22, 23], [25, 26, 27])):
        window = drafter.window
        proposal = drafter.propose(ids, config, generator)
        _, last = lookahead_tree(window, drafter.pool.candidates(ids[-1]))
        logits = torch.zeros(len(proposal.tokens) + 1, VOCAB)
        for node, token in zip(last, guesses, strict=True):
            logits[node + 1, token] = 1.0  # the target's argmax at each column's top node
        drafter.observe(TargetOutput(logits, torch.zeros(len(logits), 4)), [])
        assert (drafter.pool.candidates(7) == []) == (step == 0)  # nothing while filling
    assert drafter.window.oldest == [22, 23] and drafter.window.upper == [[25, 26, 27]]
    assert drafter.pool.candidates(7) == [(21, 25)]
    assert drafter.pool.candidates(11) == [(22, 26)] and drafter.pool.candidates(12) == [(23, 27)]


def test_the_window_as_a_tree_is_the_papers_attention_mask():
    """With distinct tokens nothing merges: each lookahead token's ancestors are what the
    paper's mask lets it see, and its depth is its position offset."""
    width, levels = 4, 3  # W 4, N 4
    oldest = [100 + j for j in range(width - 1)]
    upper = [[100 * (level + 1) + i for i in range(width)] for level in range(1, levels)]
    window = JacobiWindow(list(oldest), levels)
    window.upper = [list(level) for level in upper]
    proposal, last = lookahead_tree(window, [])
    seen = {}
    for node, parent in enumerate(proposal.parents):
        seen[node] = (seen[parent] if parent >= 0 else set()) | {proposal.tokens[node]}
    node_of = {token: node for node, token in enumerate(proposal.tokens)}
    for j, token in enumerate(oldest):  # the oldest level is causal after the pending token
        assert seen[node_of[token]] == set(oldest[: j + 1])
    for level, row in enumerate(upper, start=1):
        for i, token in enumerate(row):
            column = {upper[lower][i] for lower in range(level)}
            assert seen[node_of[token]] == set(oldest[:i]) | column
            assert len(seen[node_of[token]]) == i + level  # depth: position t + i + level
    assert [proposal.tokens[node] for node in last] == upper[-1]


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: f"W{s.window}N{s.ngram_size}")
def test_every_proposal_is_a_valid_tree_within_its_bound(tiny_target, settings):
    drafter = Recording(settings)
    _generate(tiny_target, drafter, REPETITIVE, DecodeConfig(max_new_tokens=30))
    window, size = settings.window, settings.ngram_size
    steady = (window - 1) + (size - 2) * window + settings.candidates * (size - 1)
    assert len(drafter.proposals) > size
    for step, proposal in enumerate(drafter.proposals):
        parents = proposal.parents
        assert len(parents) == len(proposal.tokens) <= settings.max_nodes
        assert all(-1 <= parent < node for node, parent in enumerate(parents))
        siblings = list(zip(parents, proposal.tokens, strict=True))
        assert len(set(siblings)) == len(siblings)  # a token appears once under a parent
        assert proposal.q is None and proposal.draws is None  # deterministic children
        if step >= size - 2:  # the window is full
            assert len(proposal.tokens) <= steady


def test_method_parameters_override_the_defaults_and_bad_ones_are_refused():
    drafter = LookaheadDrafter()
    config = DecodeConfig(method_params={"window": 6, "ngram_size": 4, "candidates": 2})
    assert drafter.describe(config) == {
        "window": 6,
        "ngram_size": 4,
        "candidates": 2,
        "prompt_pool": False,
    }
    ids = prompt(length=6)
    drafter.begin(ids, None)
    drafter.propose(ids, config, torch.Generator().manual_seed(0))
    assert drafter.window.width == 6 + 4 - 2  # W + N - 3 guesses to start: W + N - 2 columns
    for bad in ({"window": 0}, {"ngram_size": 1}, {"candidates": -1}, {"window": 2.5}):
        with pytest.raises(SpecdecError, match="lookahead"):
            drafter.describe(DecodeConfig(method_params=bad))


def test_the_window_is_drawn_with_the_runs_generator_only(tiny_target):
    ids = prompt(length=8)
    config = DecodeConfig(max_new_tokens=20, seed=3)
    drafted = []
    for global_seed in (0, 1):
        torch.manual_seed(global_seed)
        drafter = Recording(LookaheadSettings())
        _generate(tiny_target, drafter, ids, config)
        drafted.append([p.tokens for p in drafter.proposals])
    assert drafted[0] == drafted[1]
    drafter = Recording(LookaheadSettings())
    _generate(tiny_target, drafter, ids, config, generator=torch.Generator().manual_seed(4))
    assert [p.tokens for p in drafter.proposals] != drafted[0]


def test_end_of_sequence_never_enters_the_window():
    drafter = LookaheadDrafter(LookaheadSettings(window=6, ngram_size=4), eos_ids={EOS})
    ids = [1, EOS, 5, EOS, 6, EOS]  # a chat prompt has end-of-turn tokens
    drafter.begin(ids, None)
    generator = torch.Generator().manual_seed(0)
    drafter.propose(ids, DecodeConfig(), generator)
    assert set(drafter.window.oldest) <= {1, 5, 6}
    drafter.window.oldest[0] = EOS  # as if the target had guessed it
    drafter.propose(ids, DecodeConfig(), generator)
    assert EOS not in drafter.window.oldest


def _greedy_acceptance_then_sample(proposal, p, verifier, generator, p_soft=None):
    """A wrong rule: accept a drafted token when it is its row's argmax (the Jacobi fixed-point
    test), then sample the next token from the row after the path."""
    path, _ = verify_greedy(proposal, p.argmax(-1).tolist())
    row = path[-1] + 1 if path else 0
    return path, sample(p[row], generator)


@pytest.fixture(scope="module")
def sharp_target():
    """A tiny target with sharper logits, so that drafts are accepted often at T > 0."""
    return tiny_loaded(1, model=tiny_model(1, sharpness=12.0))


# a context whose continuation the prompt's own n-grams often guess (prompt_pool)
SAMPLED = [1, 4, 11, 18] + [8, 18] * 6
POOLED = LookaheadSettings(window=3, ngram_size=3, candidates=3, prompt_pool=True)


def _first_two(target, temperature, top_p, samples):
    config = DecodeConfig(max_new_tokens=2, temperature=temperature, top_p=top_p)
    drafter = LookaheadDrafter(POOLED, {EOS})
    return sample_first_two_tokens(target, drafter, SAMPLED, config, samples=samples, seed=7)


@pytest.mark.parametrize(
    "temperature, top_p, samples",
    [(1.0, 1.0, 400), pytest.param(0.7, 0.9, 2000, marks=pytest.mark.slow)],
)
def test_sampled_tokens_follow_target_distribution(sharp_target, temperature, top_p, samples):
    firsts, seconds, accepted = _first_two(sharp_target, temperature, top_p, samples)
    first, second = target_marginals(sharp_target.model, SAMPLED, temperature, top_p)
    assert accepted > samples // 4, "the test must exercise accepted drafts"
    assert chi_square_pvalue(firsts, first) > 0.001
    assert chi_square_pvalue(seconds, second) > 0.001


def test_the_sampling_test_detects_greedy_acceptance(sharp_target, monkeypatch):
    """Power check: accepting a draft because it is its row's argmax must fail the same test."""
    monkeypatch.setattr(decode_module, "verify_proposal", _greedy_acceptance_then_sample)
    firsts, seconds, _ = _first_two(sharp_target, 1.0, 1.0, 200)
    monkeypatch.undo()
    first, second = target_marginals(sharp_target.model, SAMPLED, 1.0, 1.0)
    with pytest.raises(AssertionError):
        assert chi_square_pvalue(firsts, first) > 0.001
        assert chi_square_pvalue(seconds, second) > 0.001


def test_each_columns_top_row_is_the_targets_own_for_its_path(tiny_target):
    """The row that makes a column's new guess is the target's on that column's path."""
    ids = prompt(length=6)
    window = JacobiWindow([7, 8], levels=2)
    window.upper = [[9, 10, 11]]
    proposal, last = lookahead_tree(window, [(12, 13)])
    runner = Target(tiny_target.model)
    runner.prefill(ids[:-1])
    out = runner.forward([ids[-1], *proposal.tokens], proposal.parents)
    contexts = [[9], [7, 10], [7, 8, 11]]  # column i: oldest[:i], then its level-1 token
    for node, context in zip(last, contexts, strict=True):
        alone = tiny_target.model(torch.tensor([[*ids, *context]])).logits[0, -1]
        torch.testing.assert_close(out.logits[node + 1], alone, atol=1e-4, rtol=1e-4)


@pytest.mark.slow
def test_embedded_lookahead_equals_ar(embedded):
    from specdec_core.run.prompts import encode_prompt, read_prompt_file

    config = DecodeConfig(max_new_tokens=48)
    for text in read_prompt_file("docs/bench/mixed10.jsonl", limit=2):
        ids = encode_prompt(embedded.tokenizer, text)
        reference = run(embedded, "ar", ids, config)
        drafter = LookaheadDrafter(eos_ids=embedded.eos_ids)
        _, summary = _generate(embedded, drafter, ids, config)
        assert summary.token_ids == reference.token_ids
