"""Each Step carries its drafter's status: the layers a self-speculative draft skips, SWIFT's
search as it runs, lookahead's n-gram pool (tiny models)."""

from __future__ import annotations

from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.events import SearchState, SkippedLayers, Step
from specdec_core.drafters.layer_skip import LayerSkipDrafter
from specdec_core.drafters.lookahead import LookaheadDrafter
from specdec_core.drafters.swift import SwiftDrafter
from specdec_core.loop.decode import generate
from tests.tiny import prompt, tiny_loaded, tiny_model

LAYERS = 4


def steps_of(drafter, config: DecodeConfig, length: int = 12) -> list[Step]:
    target = tiny_loaded(seed=3, model=tiny_model(seed=3, layers=LAYERS))
    events = generate(target, drafter, prompt(length=length), config)
    return [event for event in events if isinstance(event, Step)]


def test_a_swift_run_shows_its_search_progressing_then_fixed():
    drafter = SwiftDrafter(LAYERS, window=6, target_score=1.01, patience=99, max_iterations=5)
    steps = steps_of(drafter, DecodeConfig(max_new_tokens=40, k=3))
    searches = [step.status.search for step in steps]
    states = [search.state for search in searches]
    assert states[0] == SearchState.SEARCHING  # the 11 prompt positions already fill the window
    assert states[-1] == SearchState.EXHAUSTED
    iterations = [search.iterations for search in searches]
    assert iterations == sorted(iterations)  # one set scored per step while searching
    assert iterations[:5] == [1, 2, 3, 4, 5] and set(iterations[5:]) == {5}
    best = [search.best_score for search in searches]
    assert all(a <= b for a, b in zip(best, best[1:], strict=False))  # the best only improves
    assert all(0.0 <= search.last_score <= 1.0 for search in searches)
    # once fixed, every step drafts with the same set: the best one found
    fixed = {step.status.skipped for step in steps[5:]}
    assert len(fixed) == 1
    skipped = fixed.pop()
    assert skipped.num_layers == LAYERS
    assert set(skipped.layers + skipped.attention + skipped.mlp) <= {1, 2}  # inner layers only
    assert skipped == steps[-1].status.skipped


def test_a_swift_run_waits_for_a_window_of_context_before_searching():
    drafter = SwiftDrafter(LAYERS, window=10, patience=99, max_iterations=99)
    steps = steps_of(drafter, DecodeConfig(max_new_tokens=20, k=2), length=4)
    states = [step.status.search.state for step in steps]
    assert states[0] == SearchState.WAITING and steps[0].status.search.best_score is None
    assert SearchState.SEARCHING in states


def test_a_layer_skip_run_shows_the_layers_its_early_exit_skips():
    config = DecodeConfig(max_new_tokens=8, k=2, method_params={"exit_layer": 1.0})
    steps = steps_of(LayerSkipDrafter(LAYERS), config)
    assert {step.status for step in steps} == {steps[0].status}
    assert steps[0].status.skipped == SkippedLayers(LAYERS, layers=(1, 2, 3))
    assert steps[0].status.search is None


def test_a_lookahead_run_shows_its_pool_filling():
    config = DecodeConfig(max_new_tokens=24, k=4, method_params={"window": 3, "ngram_size": 3})
    steps = steps_of(LookaheadDrafter(), config)
    pools = [step.status.pool for step in steps]
    assert {(pool.window, pool.ngram_size) for pool in pools} == {(3, 3)}
    assert pools[0].ngrams == 0 and pools[-1].ngrams > 0
