"""Forward costs on this device that follow the machine, for sizing draft trees (`tree_sizing`).

`ForwardCosts` keeps each model's and head's costs for whoever owns it (a run, a benchmark, an
engine: it is handed to the drafters that size trees with it): `target(model)`, seconds per
target forward over n tree tokens after a cached prefix; `head(key, step)`, seconds per head
step over k beam rows; `for_sizing(...)` both as the `Costs` a sizer chooses with.
A fresh `ForwardCosts` measures again, so what it returns never depends on what ran before it
elsewhere in the process.

Measured when first asked: each size is timed REPEATS times, the rounds going round all the
sizes in turn (a burst of load inflates one round of every size, not every run of the sizes it
falls on), and each size costs the `typical` of its timings: the mean of those within OUTLIER×
of their median, so a repeat far above it (another process's time slice) or far below it
counts for nothing. `monotone` then makes costs never fall with size. A table whose sizes all
lie within LINE_FIT of a straight line a + b·n (fitted by least squares on relative errors,
`line_fit`) is that line: on a CPU a forward's cost grows by the same time per token (SmolLM2:
within 3 %), and one size's timing carries 5-9 % of noise between two loads (a quiet 2-core
machine: 9 % at one token, 8 % the other way at 32), which moved the choice between trees a
few per cent apart in speed. The line spends all sizes' timings on two numbers, so two loads
choose the same tree far more often (tests/test_forward_costs_follow.py); a table the line
misses (a GPU's flat start and knee) stays as timed.

Followed as runs go: every decode step already times its one target forward over n tokens
(`StepPhases.target`, decode.py), and a drafter that sizes with these costs (`TimedForwards`)
hands each (n, seconds) to `observe_target`, at no cost of its own. `TargetTable` keeps the
step's time as a ratio to the measured cost at n, in the window of the measured size nearest
to n (log scale): the latest WINDOW ratios, which start as PRIOR ratios of 1 (the weight of
the measurement). A size's ratio is the `typical` of its window, so one outlier step (a page
fault, another process) moves nothing while a lasting change (a busier machine, a longer
context) takes over within a few steps; a size no step has timed takes the ratio interpolated
(in log n) between the timed ones, the nearest one's beyond them, 1 before any. The table in
use is measured × ratio, made monotone; the same measurement and the same step timings give
the same table, so two sizings fed them choose the same tree. `target(model)` returns it (the
same object until a step timing changes it); `Costs.describe()` / `Costs.text()` report it in
the run's config (the bench JSON's `tree_sizing`, the window's hover). Head costs are measured
once (the same rounds and `typical`); a step's head passes are not one size.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from specdec_core.control import StopFlag
from specdec_core.decoding.cost_store import (
    CHECK_REPEATS,
    CostStore,
    machine_key,
    model_key,
    scaled,
)
from specdec_core.decoding.target import Target

TARGET_SIZES = (1, 2, 4, 8, 16, 32, 60)  # tokens per measured target forward
HEAD_ROWS = (1, 2, 4, 7, 10)  # beam widths per measured head step
PREFIX = 128  # cached tokens under the measured forwards (a short chat prompt)
REPEATS = 5  # timed rounds over all sizes when first measured
LINE_FIT = 0.12  # a timed table within 12 % of a line at every size is that line
OUTLIER = 1.5  # a timing beyond 1.5x (or below 1/1.5x) its size's median is another cause's
WINDOW = 32  # latest step ratios kept per measured size
PRIOR = 4  # ratios of 1 each window starts with: the measurement's weight against steps


@dataclass(frozen=True)
class Costs:
    target: dict[int, float]  # tokens -> seconds per target forward
    head: dict[int, float]  # rows -> seconds per head step (layer + lm_head + top-k)
    steps: int = 0  # decode steps' timings the target table follows (forward_costs.py)
    line: bool = False  # the target table timed at load is the line through its timings
    kept: bool = False  # the target table was kept from an earlier run, checked at load

    def target_seconds(self, n: int) -> float:
        return interpolate(self.target, n)

    def head_seconds(self, k: int) -> float:
        return interpolate(self.head, k)

    def describe(self) -> dict:
        """The tables in use, in milliseconds, for the run's config."""
        return {
            "target_ms": {n: round(1000 * s, 3) for n, s in sorted(self.target.items())},
            "head_ms": {k: round(1000 * s, 3) for k, s in sorted(self.head.items())},
            "target_steps": self.steps,
            "target_line": self.line,
            "target_kept": self.kept,
        }

    def text(self) -> str:
        """The target table in use in one line (the reason's last part: bench JSON, hover)."""
        table = ", ".join(f"{n}: {1000 * s:.2f}" for n, s in sorted(self.target.items()))
        line = ", a line through the timings" if self.line else ""
        since = f", followed over {self.steps} steps" if self.steps else ""
        timed = "kept from an earlier run, checked at load" if self.kept else "timed at load"
        return f"target ms by tokens {table} ({timed}{line}{since})"


def interpolate(table: dict[int, float], x: float) -> float:
    """Linear between measured points; linear extrapolation past the largest."""
    points = sorted(table.items())
    if x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:], strict=False):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    (x0, y0), (x1, y1) = points[-2:] if len(points) > 1 else (points[0], points[0])
    slope = (y1 - y0) / (x1 - x0) if x1 != x0 else 0.0
    return y1 + slope * (x - x1)


class TimingStopped(Exception):
    """Stop came while forward passes were being timed: nothing of that timing is kept."""


@runtime_checkable
class TimedForwards(Protocol):
    """A drafter whose tree size reads `ForwardCosts`: the decode loop hands it the time of
    each step's target forward (over `tokens` tokens: the pending one and the proposal)."""

    def target_forward_timed(self, tokens: int, seconds: float) -> None: ...


class TargetTable:
    """One model's target forward costs: `measured` once, then following step timings."""

    def __init__(self, measured: dict[int, float]) -> None:
        timed = monotone(measured)
        self.measured = line_fit(timed)
        self.line = self.measured != timed  # the timings lie on a line, which is used
        self.steps = 0  # step timings fed in (outliers included: they are trimmed on reading)
        self._ratios: dict[int, deque[float]] = {}  # measured size -> latest step ratios
        self._costs: dict[int, float] | None = self.measured

    def observe(self, tokens: int, seconds: float) -> None:
        """One step's target forward over `tokens` tokens took `seconds`."""
        if tokens < 1 or not math.isfinite(seconds) or seconds <= 0:
            return
        size = min(self.measured, key=lambda n: (abs(math.log(n / tokens)), n))
        window = self._ratios.setdefault(size, deque([1.0] * PRIOR, maxlen=WINDOW))
        window.append(seconds / interpolate(self.measured, tokens))
        self.steps += 1
        self._costs = None

    def costs(self) -> dict[int, float]:
        """Seconds per forward by size: measured x each size's step ratio, monotone."""
        if self._costs is None:
            timed = {n: typical(list(window)) for n, window in sorted(self._ratios.items())}
            self._costs = monotone(
                {n: cost * _ratio_at(timed, n) for n, cost in self.measured.items()}
            )
        return self._costs


class ForwardCosts:
    """Target costs measured once per model and followed by its steps; head costs measured
    once per head key."""

    def __init__(self, stop: StopFlag | None = None, store: CostStore | None = None) -> None:
        """`store`: tables kept from earlier runs on this machine (cost_store.py), checked
        cheaply and used where they still fit; None measures every model afresh."""
        self._target: dict[tuple, TargetTable] = {}
        self._head: dict[tuple, dict[int, float]] = {}
        self._stop = stop  # checked between the timed forwards of a first measurement
        self._store = store
        self._reused: set[tuple] = set()  # models whose table came from the store

    def watching(self, stop: StopFlag | None) -> ForwardCosts:
        """These costs (the same tables, shared) for one run: a measurement it starts ends
        with `TimingStopped` when `stop` is set between two timed forwards."""
        view = ForwardCosts(stop, self._store)
        view._target, view._head, view._reused = self._target, self._head, self._reused
        return view

    def target(self, model) -> dict[int, float]:
        """Seconds per target forward over n tree tokens after a cached prefix (the table in
        use: measured at the first call, then following `observe_target`)."""
        key = _model_key(model)
        if key not in self._target:
            self._target[key] = TargetTable(self._kept_or_measured(model, key))
        return self._target[key].costs()

    def target_reused(self, model) -> bool:
        """Whether the model's table was kept from an earlier run (checked, not measured)."""
        return _model_key(model) in self._reused

    def _kept_or_measured(self, model, key: tuple) -> dict[int, float]:
        """The store's table for this machine and model where a check of its smallest and
        largest size still fits its shape (`scaled`: as it is, or all of it slower or faster
        by the check's ratio when the machine is busier or quieter now), else a new
        measurement (then kept)."""
        model_name = model_key(model)
        if self._store is None or model_name is None:
            return _measure_target(model, self._stop)
        name = f"{machine_key()} || {model_name}"
        kept = self._store.get(name)
        if kept is not None:
            ends = sorted(kept)[:: max(1, len(kept) - 1)]  # the smallest and the largest
            table = scaled(kept, _measure_target(model, self._stop, ends, CHECK_REPEATS))
            if table is not None:
                self._reused.add(key)
                return table
        table = _measure_target(model, self._stop)
        self._store.put(name, table)
        return table

    def observe_target(self, model, tokens: int, seconds: float) -> None:
        """A run's target forward over `tokens` tokens took `seconds` (ignored for a model
        not measured yet: only a table in use is followed)."""
        table = self._target.get(_model_key(model))
        if table is not None:
            table.observe(tokens, seconds)

    def target_line(self, model) -> bool:
        """Whether the model's measured table is the line through its timings (`line_fit`)."""
        table = self._target.get(_model_key(model))
        return table is not None and table.line

    def target_steps(self, model) -> int:
        """Step timings the model's table has taken in (0 before it is measured)."""
        table = self._target.get(_model_key(model))
        return table.steps if table is not None else 0

    def head(self, key: tuple, step: Callable[[int], None]) -> dict[int, float]:
        """Seconds per head step over k rows; `step(k)` runs one (measured once per `key`)."""
        if key not in self._head:
            runs = {k: (lambda k=k: step(k)) for k in HEAD_ROWS}
            self._head[key] = line_fit(monotone(typical_costs(runs, stop=self._stop)))
        return self._head[key]

    def for_sizing(self, model, head_key: tuple, step: Callable[[int], None]) -> Costs:
        """The tables a sizer chooses with now: the model's target table in use and the
        head's step costs, with how many step timings the target table follows."""
        target = self.target(model)
        head = self.head(head_key, step)
        steps, line = self.target_steps(model), self.target_line(model)
        return Costs(target, head, steps, line, self.target_reused(model))


@torch.inference_mode()
def _measure_target(
    model, stop: StopFlag | None = None, only: list[int] | None = None, repeats: int = REPEATS
) -> dict[int, float]:
    """Seconds per target forward over each of TARGET_SIZES tokens (`only`: those of them)."""
    runner = Target(model)
    vocab = int(model.config.vocab_size)
    prefix = min(PREFIX, int(getattr(model.config, "max_position_embeddings", 2048)) // 2)
    runner.prefill([i % vocab for i in range(prefix)])
    sizes = [n for n in TARGET_SIZES if prefix + n < 2 * prefix and (only is None or n in only)]

    def forward(n: int) -> None:
        chain = tuple(range(-1, n - 2))  # a chain through the tree path: same cost as a tree
        runner.forward([7 % vocab] * n, chain if n > 1 else None)
        runner.keep(prefix, [])

    runs = {n: (lambda n=n: forward(n)) for n in sizes}
    return monotone(typical_costs(runs, repeats, stop=stop))


def rounds(
    runs: dict[int, Callable[[], None]],
    repeats: int = REPEATS,
    clock=time.perf_counter,
    stop: StopFlag | None = None,
) -> dict[int, list[float]]:
    """Seconds of each of `repeats` runs of each of `runs`, after one warm-up run each. The
    repeats go round all the sizes in turn, so a burst of load inflates one round of every
    size, not every run of the sizes it falls on. (Timed size by size, such a burst once made
    a benchmark run choose trees several times larger than the fastest size;
    docs/benchmarks.md.) `stop` set before any run raises `TimingStopped`."""
    for run in runs.values():
        _check(stop)
        run()  # warm-up
    seconds: dict[int, list[float]] = {n: [] for n in runs}
    for _ in range(repeats):
        for n, run in runs.items():
            _check(stop)
            _sync()
            start = clock()
            run()
            _sync()
            seconds[n].append(clock() - start)
    return seconds


def typical_costs(
    runs: dict[int, Callable[[], None]],
    repeats: int = REPEATS,
    clock=time.perf_counter,
    stop: StopFlag | None = None,
) -> dict[int, float]:
    """The `typical` seconds of each of `runs` over `repeats` `rounds` (`stop` as there)."""
    return {n: typical(times) for n, times in rounds(runs, repeats, clock, stop).items()}


def fastest(
    runs: dict[int, Callable[[], None]], repeats: int = 4, clock=time.perf_counter
) -> dict[int, float]:
    """Seconds of the fastest of `repeats` `rounds` of each of `runs`."""
    return {n: min(times) for n, times in rounds(runs, repeats, clock).items()}


def typical(samples: list[float]) -> float:
    """The mean of the samples within OUTLIER x of their median (above and below): what one
    run typically takes, one disturbed run or a few left out. Where none is that near (two
    equal halves far apart, as when the machine's speed changes mid-window), the median."""
    middle = statistics.median(samples)
    kept = [s for s in samples if middle / OUTLIER <= s <= middle * OUTLIER]
    return statistics.fmean(kept) if kept else middle


def monotone(costs: dict[int, float]) -> dict[int, float]:
    """Costs that never fall with size: more tokens (or rows) never cost less, so a size timed
    above a larger one was slowed by something else and takes the larger one's time."""
    out, lowest = {}, float("inf")
    for n in sorted(costs, reverse=True):
        lowest = min(lowest, costs[n])
        out[n] = lowest
    return dict(sorted(out.items()))


def line_fit(costs: dict[int, float], tolerance: float = LINE_FIT) -> dict[int, float]:
    """`costs` on the line a + b·n nearest them in relative error (weighted least squares),
    when every size lies within `tolerance` of it and b ≥ 0; else `costs` as they are."""
    sizes = sorted(costs)
    if len(sizes) < 3:
        return dict(costs)
    x = torch.tensor(sizes, dtype=torch.float64)
    y = torch.tensor([costs[n] for n in sizes], dtype=torch.float64)
    design = torch.stack([torch.ones_like(x), x], dim=1) / y[:, None]  # relative errors
    a, b = torch.linalg.lstsq(design, torch.ones_like(y)[:, None]).solution[:, 0].tolist()
    line = {n: a + b * n for n in sizes}
    if b < 0 or a <= 0 or any(abs(line[n] / costs[n] - 1) > tolerance for n in sizes):
        return dict(costs)
    return line


def _ratio_at(timed: dict[int, float], n: int) -> float:
    """The step ratio at size `n`: its own, else interpolated in log n between the nearest
    timed sizes around it, the nearest one's beyond them, 1 when no size was timed."""
    if n in timed:
        return timed[n]
    below = [m for m in timed if m < n]
    above = [m for m in timed if m > n]
    if not below and not above:
        return 1.0
    if not below or not above:
        return timed[min(above) if above else max(below)]
    low, high = max(below), min(above)
    share = math.log(n / low) / math.log(high / low)
    return timed[low] + share * (timed[high] - timed[low])


def _check(stop: StopFlag | None) -> None:
    if stop is not None and stop.is_set():
        raise TimingStopped()


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _model_key(model) -> tuple:
    config = model.config
    return (
        getattr(config, "_name_or_path", ""),
        config.hidden_size,
        config.num_hidden_layers,
        config.vocab_size,
        str(model.device),
        str(model.dtype),
        id(model),
    )
