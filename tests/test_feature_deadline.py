"""A feature collection under a deadline: no forward starts after it, except the first one of
a run that has no features yet, so a late start on a busy machine never leaves it empty."""

from __future__ import annotations

import time

from specdec_core.training.datasets import Sample
from specdec_core.training.features import extract_features
from tests.tiny import tiny_model


def _samples() -> list[Sample]:
    return [Sample([1, *range(3, 3 + n)], 1) for n in (6, 7, 8, 9)]


def test_a_passed_deadline_starts_no_forward():
    passed = time.monotonic() - 1.0
    assert (
        extract_features(tiny_model(seed=1), _samples(), None, batch_tokens=16, until=passed) == []
    )


def test_a_run_with_nothing_yet_gets_one_batch_past_its_deadline():
    passed = time.monotonic() - 1.0
    made = extract_features(
        tiny_model(seed=1), _samples(), None, batch_tokens=16, until=passed, at_least_one=True
    )
    assert 0 < len(made) < len(_samples())  # one batch of 16 padded tokens, the first samples
    assert [item.ids.tolist() for item in made] == [s.ids for s in _samples()[: len(made)]]
