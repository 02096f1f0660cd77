"""Percentile bootstrap: how far a measured number moves when the samples it came from are drawn
again.

A statistic (a speedup: tokens over time against a reference's) is computed `resamples` times,
each time on samples drawn with replacement from the measured ones, by a `draw(rng)` the caller
writes (it knows what its samples are: prompts in `measure.speedup_spread`, a run's steps in
`run_speedup.speedup_interval`); the 2.5th and 97.5th percentiles of those values bound the
95 % interval. The seed is fixed, so the same samples always give the same interval.

Torch-free and Qt-free: the window computes intervals with it too.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Sequence
from typing import TypeVar

RESAMPLES = 2000  # draws of the samples: enough for stable 2.5 % / 97.5 % percentiles
SEED = 0  # the same samples always give the same interval

T = TypeVar("T")


def resample(rng: random.Random, samples: Sequence[T]) -> list[T]:
    """As many samples as there are, drawn with replacement."""
    return rng.choices(samples, k=len(samples))


def percentile_interval(
    draw: Callable[[random.Random], float], resamples: int = RESAMPLES, seed: int = SEED
) -> tuple[float, float]:
    """(low, high): the middle 95 % of `draw(rng)` over `resamples` calls, all from one
    `random.Random(seed)` (each call draws its resample from it, typically with `resample`)."""
    rng = random.Random(seed)
    values = [draw(rng) for _ in range(resamples)]
    # cut points every 2.5 %: the first and the last bound the middle 95 %
    cuts = statistics.quantiles(values, n=40, method="inclusive")
    return cuts[0], cuts[-1]
