"""SWIFT: layer skipping whose skipped set is searched during the generation (tiny models)."""

from __future__ import annotations

import pytest
import torch

from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.events import Finished, Started, Step
from specdec_core.decoding.target import Target
from specdec_core.drafters.swift import SearchState, SwiftDrafter, candidates
from specdec_core.errors import SpecdecError
from specdec_core.loop.decode import generate
from specdec_core.run.runner import run
from tests.stats import chi_square_pvalue, sample_first_two_tokens, target_marginals
from tests.test_layer_skip import assert_same_cache, snapshot, windowed
from tests.tiny import prompt, tiny_loaded

LAYERS = 6


@pytest.fixture(scope="module")
def six():
    return tiny_loaded(seed=1, layers=LAYERS)


def decode(target, drafter, ids, config):
    events = list(generate(target, drafter, ids, config))
    steps = [e for e in events if isinstance(e, Step)]
    assert isinstance(events[0], Started) and isinstance(events[-1], Finished)
    return events[0], steps, events[-1].summary


@pytest.mark.parametrize(
    "setting",
    [{}, {"skip_ratio": 0.3}, {"skip_ratio": 0.6, "per_step": 3}, {"window": 12, "patience": 2}],
    ids=str,
)
@pytest.mark.parametrize("k", [1, 4])
def test_swift_decodes_exactly_like_ar_while_and_after_searching(six, setting, k):
    ids = prompt(length=14)
    config = DecodeConfig(max_new_tokens=40, k=k)
    reference = run(six, "ar", ids, config)
    drafter = SwiftDrafter(LAYERS, **{"window": 8, **setting})
    _, steps, summary = decode(six, drafter, ids, config)
    assert summary.token_ids == reference.token_ids
    assert drafter.progress().iterations > 0  # the search ran during the generation
    assert all(step.phases.draft_parts.keys() == {"search", "draft"} for step in steps)


def test_the_search_waits_for_a_window_of_context_then_scores_sets(six):
    drafter = SwiftDrafter(LAYERS, window=10, patience=50, max_iterations=50)
    ids = prompt(length=5)  # 4 cached positions: fewer than the window
    config = DecodeConfig(max_new_tokens=30, k=3)
    started, steps, _ = decode(six, drafter, ids, config)
    assert started.config["search_state"] == "waiting"
    progress = drafter.progress()
    # the window fills after about 6 new tokens; one set is scored per step after that
    assert progress.state == SearchState.SEARCHING
    assert 0 < progress.iterations < len(steps)
    assert 0.0 <= progress.best_score <= 1.0 and progress.window == 10
    assert progress.skip.size == drafter.count == int(2 * (LAYERS - 2) * 0.45)
    assert 0 not in progress.skip.attention | progress.skip.mlp  # first and last layers kept
    assert LAYERS - 1 not in progress.skip.attention | progress.skip.mlp
    assert progress.record()["search_state"] == "searching"


@pytest.mark.parametrize(
    "setting, state",
    [
        ({"target_score": 0.0}, SearchState.REACHED),
        ({"target_score": 1.01, "patience": 2, "max_iterations": 99}, SearchState.STALLED),
        ({"target_score": 1.01, "patience": 99, "max_iterations": 3}, SearchState.EXHAUSTED),
    ],
)
def test_the_search_stops_at_the_target_score_patience_or_iteration_limit(six, setting, state):
    drafter = SwiftDrafter(LAYERS, window=8, **setting)
    decode(six, drafter, prompt(length=14), DecodeConfig(max_new_tokens=40, k=2))
    progress = drafter.progress()
    assert progress.state == state and progress.state.done
    if state == SearchState.REACHED:
        assert progress.iterations == 1
    if state == SearchState.EXHAUSTED:
        assert progress.iterations == 3


def test_each_generation_searches_afresh_and_alike(six):
    drafter = SwiftDrafter(LAYERS, window=8)
    config = DecodeConfig(max_new_tokens=30, k=3)
    _, _, first = decode(six, drafter, prompt(length=14), config)
    found = drafter.progress()
    _, _, second = decode(six, drafter, prompt(length=14), config)
    again = drafter.progress()
    assert first.token_ids == second.token_ids
    assert (found.iterations, found.best_score, found.skip) == (
        again.iterations,
        again.best_score,
        again.skip,
    )


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_searching_and_drafting_leave_the_cache_bit_identical(six, temperature):
    ids = prompt(length=12)
    target = Target(six.model)
    features = target.prefill(ids[:-1])
    drafter = SwiftDrafter(LAYERS, window=8, per_step=4, confidence=0.0)
    drafter.attach(target)
    drafter.begin(ids, features)
    before = snapshot(target.cache)
    config = DecodeConfig(k=4, temperature=temperature)
    proposal = drafter.propose(ids, config, torch.Generator().manual_seed(0))
    assert drafter.progress().iterations == 4 and len(proposal.tokens) == 4
    assert_same_cache(before, target.cache)


def test_swift_skips_sublayers_of_a_softcapped_sliding_window_model_exactly():
    target = windowed("gemma2")  # alternating sliding / full layers, post-norms, soft cap
    ids = prompt(length=12)
    config = DecodeConfig(max_new_tokens=24, k=3)
    reference = run(target, "ar", ids, config)
    drafter = SwiftDrafter(4, skip_ratio=0.3, window=6, confidence=0.0)
    _, _, summary = decode(target, drafter, ids, config)
    assert summary.token_ids == reference.token_ids
    assert drafter.progress().iterations > 0


def test_method_params_override_the_search_settings(six):
    drafter = SwiftDrafter(LAYERS)  # a 32-position window: longer than this whole run
    params = {"window": 6, "max_iterations": 2, "skip_ratio": 0.6, "confidence": 0.0}
    config = DecodeConfig(max_new_tokens=20, k=3, method_params=params)
    described = drafter.describe(config)
    assert described["search_window"] == 6 and described["skip_ratio"] == 0.6
    ids = prompt(length=10)
    started, _, summary = decode(six, drafter, ids, config)
    assert started.config["search_window"] == 6
    progress = drafter.progress()
    assert progress.state == SearchState.EXHAUSTED and progress.iterations == 2
    assert progress.skip.size == int(2 * (LAYERS - 2) * 0.6)
    assert summary.token_ids == run(six, "ar", ids, config).token_ids
    with pytest.raises(SpecdecError, match="window"):
        drafter.describe(DecodeConfig(method_params={"window": 1}))


def test_candidates_are_the_inner_sublayers_odd_layers_first():
    assert candidates(5) == [
        (1, "attention"), (1, "mlp"), (3, "attention"), (3, "mlp"),
        (2, "attention"), (2, "mlp"),
    ]  # fmt: skip


@pytest.mark.parametrize(
    "setting, message",
    [
        ({"skip_ratio": 0.1}, "skips no sublayer"),
        ({"skip_ratio": 1.0}, "skips no sublayer"),
        ({"window": 1}, "window"),
        ({"confidence": -0.1}, "confidence"),
    ],
)
def test_impossible_search_settings_are_refused(setting, message):
    with pytest.raises(SpecdecError, match=message):
        SwiftDrafter(4, **setting)


@pytest.mark.slow
def test_swift_samples_follow_the_target_distribution():
    target = tiny_loaded(seed=1, layers=4)
    ids = prompt(length=6)  # the 4-position window is full at once: every run searches
    config = DecodeConfig(max_new_tokens=2, k=3, temperature=1.0)
    drafter = SwiftDrafter(4, skip_ratio=0.3, window=4, confidence=0.0)
    firsts, seconds, accepted = sample_first_two_tokens(target, drafter, ids, config, 800, 5)
    first, second = target_marginals(target.model, ids, 1.0, 1.0)
    assert accepted > 200, "the test must exercise accepted drafts"
    assert drafter.progress().iterations > 0
    assert chi_square_pvalue(firsts, first) > 1e-3
    assert chi_square_pvalue(seconds, second) > 1e-3


@pytest.mark.slow
def test_swift_on_the_embedded_model_decodes_like_ar(embedded):
    from specdec_core.run.prompts import encode_prompt, read_prompt_file

    config = DecodeConfig(max_new_tokens=48, k=4)
    layers = embedded.model.config.num_hidden_layers
    for text in read_prompt_file("docs/bench/mixed10.jsonl", limit=2):
        ids = encode_prompt(embedded.tokenizer, text)
        reference = run(embedded, "ar", ids, config)
        drafter = SwiftDrafter(layers, max_iterations=6)
        _, _, summary = decode(embedded, drafter, ids, config)
        assert summary.token_ids == reference.token_ids
        assert drafter.progress().iterations > 0
