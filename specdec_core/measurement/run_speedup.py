"""A single run's speedup over the reference measured with it, and its 95 % interval.

The window times a run and an autoregressive reference of the same prompt and settings under
the same conditions: Generate and a chat turn measure the reference right after the run,
Compare runs `ar` in the same Compare. Both runs are made of steps, each some new tokens in
some seconds (`StepTime.of`: a step's draft, verify and loop time, which add up to its wall
time). `speedup_interval` redraws each run's steps independently (a percentile bootstrap,
`bootstrap.py`: fixed seed, 2000 resamples) and takes the middle 95 % of
(Σ tokens ÷ Σ seconds of the run) ÷ (the same of the reference). A run of more than `BLOCKS`
steps is redrawn in `BLOCKS` runs of consecutive steps (a block bootstrap): a stall from
another job spans several steps, and the window's cost stays that of 64 steps however long
the run (a few tens of milliseconds).

The speedup shown stays the ratio of the two runs' summaries (tokens/s over wall time, which
also counts the prefill and the time around the steps); the steps' own ratio differs from it
by that much. So the interval is scaled to the point shown: its bounds are the point times
the bootstrap's bounds over the steps' ratio, i.e. the bootstrap's spread relative to the
steps' ratio, carried over to the point. It says how much the speedup depends on which steps
were fast or slow (a step stalled by another job, a long accepted draft), not how it would
change on another prompt (bench's interval over prompts says that).

Torch-free and Qt-free: the window computes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specdec_core.decoding.events import Step
from specdec_core.measurement.bootstrap import RESAMPLES, SEED, percentile_interval, resample

BLOCKS = 64  # most samples a run is redrawn in


@dataclass(frozen=True)
class StepTime:
    """One step of a run: the new tokens it gave and the seconds it took."""

    tokens: int
    seconds: float

    @classmethod
    def of(cls, step: Step) -> StepTime:
        """Its emitted tokens and its wall time (draft + verify + the loop's own time: the
        phases add up to the step's wall time, `StepPhases`)."""
        return cls(len(step.tokens), step.draft_seconds + step.verify_seconds + step.phases.loop)


def steps_speedup(run: Sequence[StepTime], reference: Sequence[StepTime]) -> float:
    """The run's tokens per second of its steps over the reference's (0 where either took no
    time or the reference gave no token)."""
    speed, reference_speed = _speed(run), _speed(reference)
    return speed / reference_speed if reference_speed else 0.0


def speedup_interval(
    run: Sequence[StepTime],
    reference: Sequence[StepTime],
    point: float,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> tuple[float, float] | None:
    """(low, high): the 95 % interval of `point` (the speedup shown: the summaries' tokens/s
    ratio), from a bootstrap of each run's steps; the bounds are `point` times the bootstrap's
    bounds over the steps' own ratio. None when either run has no step or no time."""
    measured = steps_speedup(run, reference)
    if not run or not reference or measured <= 0:
        return None
    run, reference = blocks(run), blocks(reference)
    low, high = percentile_interval(
        lambda rng: steps_speedup(resample(rng, run), resample(rng, reference)), resamples, seed
    )
    scale = point / measured
    return low * scale, high * scale


def blocks(steps: Sequence[StepTime], most: int = BLOCKS) -> list[StepTime]:
    """`steps` as at most `most` runs of consecutive steps of near-equal length, each summed
    (the steps themselves when there are no more than `most`)."""
    if len(steps) <= most:
        return list(steps)
    cuts = [len(steps) * i // most for i in range(most + 1)]
    return [
        StepTime(sum(s.tokens for s in part), sum(s.seconds for s in part))
        for part in (steps[a:b] for a, b in zip(cuts, cuts[1:], strict=False))
    ]


def _speed(steps: Sequence[StepTime]) -> float:
    seconds = sum(step.seconds for step in steps)
    return sum(step.tokens for step in steps) / seconds if seconds > 0 else 0.0
