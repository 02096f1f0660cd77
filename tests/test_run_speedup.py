"""A single run's speedup carries a 95 % interval from a bootstrap of its steps and of its
reference's: steady steps give a narrow interval around the ratio, noisy steps a wider one,
the same steps always the same interval; it is scaled to the ratio shown, and computing it
never imports torch."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

from specdec_core.decoding.events import Step, StepPhases, Token, TokenKind
from specdec_core.measurement.bootstrap import percentile_interval, resample
from specdec_core.measurement.run_speedup import StepTime, speedup_interval, steps_speedup


def steps(count: int, tokens: int, seconds: float, noise: float, seed: int) -> list[StepTime]:
    """`count` steps of `tokens` tokens each, their seconds spread by ± `noise` (a share)."""
    rng = random.Random(seed)
    return [StepTime(tokens, seconds * (1 + noise * rng.uniform(-1, 1))) for _ in range(count)]


def width(interval: tuple[float, float]) -> float:
    return interval[1] - interval[0]


def test_identical_steps_give_the_ratio_itself_and_steady_ones_a_narrow_interval():
    run, reference = [StepTime(3, 0.03)] * 40, [StepTime(1, 0.02)] * 120
    assert steps_speedup(run, reference) == pytest.approx(2.0)
    assert speedup_interval(run, reference, 2.0) == pytest.approx((2.0, 2.0))
    steady = speedup_interval(steps(40, 3, 0.03, 0.02, 1), steps(120, 1, 0.02, 0.02, 2), 2.0)
    assert steady[0] < 2.0 < steady[1] and width(steady) < 0.05


def test_noisier_steps_give_a_wider_interval_that_still_holds_the_ratio():
    intervals = []
    for noise in (0.05, 0.3, 0.8):
        run, reference = steps(40, 3, 0.03, noise, 1), steps(120, 1, 0.02, noise, 2)
        point = steps_speedup(run, reference)
        low, high = speedup_interval(run, reference, point)
        assert low < point < high
        intervals.append((low, high))
    assert width(intervals[0]) < width(intervals[1]) < width(intervals[2])


def test_the_interval_is_the_same_every_time_and_moves_only_with_its_seed():
    run, reference = steps(40, 3, 0.03, 0.3, 1), steps(120, 1, 0.02, 0.3, 2)
    point = steps_speedup(run, reference)
    assert speedup_interval(run, reference, point) == speedup_interval(run, reference, point)
    assert speedup_interval(run, reference, point, seed=1) != speedup_interval(
        run, reference, point
    )


def test_the_interval_is_scaled_to_the_ratio_shown():
    """The summaries' ratio counts the prefill too; the interval keeps its relative spread."""
    run, reference = steps(40, 3, 0.03, 0.3, 1), steps(120, 1, 0.02, 0.3, 2)
    point = steps_speedup(run, reference)
    low, high = speedup_interval(run, reference, point)
    shown = speedup_interval(run, reference, 0.9 * point)
    assert shown == pytest.approx((0.9 * low, 0.9 * high))


def test_no_interval_without_steps_or_time():
    assert speedup_interval([], [StepTime(1, 0.02)], 1.5) is None
    assert speedup_interval([StepTime(2, 0.02)], [], 1.5) is None
    assert speedup_interval([StepTime(2, 0.0)], [StepTime(1, 0.0)], 1.5) is None


def test_a_step_takes_its_draft_verify_and_loop_time_and_gives_its_tokens():
    tokens = tuple(Token(n, "x", TokenKind.ACCEPTED_DRAFT, 0, 0.5) for n in range(3))
    phases = StepPhases(draft=0.01, target=0.02, accept=0.003, keep=0.001, commit=0.004, loop=0.2)
    step = Step(0, tokens, 4, 2, phases=phases)
    timed = StepTime.of(step)
    assert timed.tokens == 3
    assert timed.seconds == pytest.approx(phases.total)


def test_the_bootstrap_core_takes_the_middle_95_percent_of_its_draws():
    values = list(range(1, 401))
    low, high = percentile_interval(lambda rng: float(sum(resample(rng, values))) / 400)
    assert low < 200.5 < high
    assert percentile_interval(lambda rng: 7.0) == (7.0, 7.0)


def test_computing_a_speedup_interval_never_imports_torch():
    code = (
        "import sys, app.reference;"
        "import specdec_core.measurement.run_speedup, specdec_core.measurement.bootstrap;"
        "assert 'torch' not in sys.modules, 'torch was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_long_run_is_redrawn_in_blocks_of_consecutive_steps_with_the_same_totals():
    from specdec_core.measurement.run_speedup import BLOCKS, blocks

    steps = [StepTime(1 + i % 3, 0.01 * (1 + i % 5)) for i in range(4096)]
    grouped = blocks(steps)
    assert len(grouped) == BLOCKS
    assert sum(b.tokens for b in grouped) == sum(s.tokens for s in steps)
    assert sum(b.seconds for b in grouped) == pytest.approx(sum(s.seconds for s in steps))
    assert blocks(steps[:10]) == steps[:10]  # short runs keep their steps
    # a stall spanning many steps widens the interval
    stalled = steps[:2048] + [StepTime(s.tokens, s.seconds * 3) for s in steps[2048:]]
    steady_low, steady_high = speedup_interval(steps, steps, 1.0)
    low, high = speedup_interval(stalled, steps, 1.0)
    assert low < 1.0 < high and high - low > 3 * (steady_high - steady_low)
