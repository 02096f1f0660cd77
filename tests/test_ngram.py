"""The n-gram (prompt lookup) drafter: right continuations, and lossless output equal to `ar`."""

from __future__ import annotations

import pytest

from specdec_core.decoding.config import DecodeConfig
from specdec_core.drafters.ngram import prompt_lookup
from specdec_core.run.runner import run
from tests.tiny import prompt


def test_proposes_the_tokens_that_followed_the_last_match():
    ids = [1, 5, 6, 7, 8, 9, 3, 5, 6]
    assert prompt_lookup(ids, k=3, ngram_max=2) == [7, 8, 9]


def test_prefers_the_longest_match_over_a_more_recent_shorter_one():
    # suffix (4, 5): the bigram occurs once (-> 6); the unigram 5 occurs later (-> 9)
    ids = [4, 5, 6, 7, 5, 9, 4, 5]
    assert prompt_lookup(ids, k=2, ngram_max=2) == [6, 7]
    assert prompt_lookup(ids, k=2, ngram_max=1) == [9, 4]


def test_prefers_the_most_recent_of_equally_long_matches():
    ids = [5, 6, 5, 7, 5]
    assert prompt_lookup(ids, k=1, ngram_max=3) == [7]


def test_extends_a_repeating_pattern_to_the_full_draft_length():
    ids = [1, 8, 9, 8, 9]
    assert prompt_lookup(ids, k=5, ngram_max=2) == [8, 9, 8, 9, 8]


def test_proposes_nothing_without_a_match():
    assert prompt_lookup([1, 2, 3, 4], k=4, ngram_max=3) == []
    assert prompt_lookup([7], k=4, ngram_max=3) == []


def test_does_not_match_the_suffix_with_itself():
    assert prompt_lookup([3, 4, 5], k=2, ngram_max=3) == []


REPEATING = [1, 5, 6, 7, 8, 5, 6, 7, 8, 5, 6]


@pytest.mark.parametrize("prompt_ids", [prompt(6), prompt(9, offset=11), REPEATING])
@pytest.mark.parametrize("k", [1, 3, 5])
def test_greedy_ngram_with_lossless_equals_autoregressive(tiny_target, prompt_ids, k):
    config = DecodeConfig(max_new_tokens=24, k=k, ngram_max=3)
    ar = run(tiny_target, "ar", prompt_ids, config)
    ngram = run(tiny_target, "ngram", prompt_ids, config)
    assert ngram.token_ids == ar.token_ids
    assert not ngram.lossy


def test_ngram_drafts_and_accepts_on_repetitive_text(tiny_target):
    config = DecodeConfig(max_new_tokens=24, k=4)
    summary = run(tiny_target, "ngram", REPEATING, config)
    assert sum(summary.drafted_per_position) > 0
