"""`specdec sweep`: speedup and τ of one method over a grid of settings, measured in one run.

The grid is the cartesian product of the requested values, nothing more: `--k 1,2 --temperature 0,1`
is exactly four points. Speedup is a ratio measured in this process
(docs/architecture.md#measurement): the autoregressive baseline is run on the same prompts once per
temperature, the first time a point at that temperature is measured, and every point records the
baseline it was divided by. A resumed sweep measures its baseline again, so each ratio still comes
from one process; with `baseline="point"` it is measured again right before every point (twice the
time, robust against a machine whose load drifts during the sweep).

Results are written to the JSON file after every point, so Ctrl+C (or a crash) keeps the points
finished so far, and `resume=True` skips the points the file already holds — provided it was
measured with the same method, target, prompts and fixed settings (otherwise a `SpecdecError`).

`stop` (the window's Stop) ends a sweep within one decode step: it reaches the runs inside the
point being measured (a `BenchMeasure` decodes with it; any measure may raise
`MeasurementStopped`), that point is dropped, and the result keeps the points finished before
it; `interrupted_point` names the one Stop cut short (or, stopped between points, the next).

The loop only needs a `Measure` (method, config, reference token ids -> bench-style metrics);
`BenchMeasure` is the real one, built on the benchmark's own per-prompt runner, so whatever
the benchmark reports per method (fidelity numbers included) lands in each point. A suffix
method drafts from a history of the point's own (drafters/suffix.py), empty when the point
begins: no point drafts from another point's output of the same prompt.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from specdec_core.control import StopFlag
from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.forward_costs import ForwardCosts
from specdec_core.drafters.suffix import History
from specdec_core.drafters.tree_sizing import AcceptanceEstimates
from specdec_core.errors import SpecdecError
from specdec_core.measurement.measure import (
    Measurement,
    MeasurementStopped,
    aggregate,
    compared,
    run_one,
    warm_up,
)
from specdec_core.measurement.sweep_records import (  # noqa: F401 (the records, also named from here)
    AXES,
    BASELINES,
    PARAM_PREFIX,
    Grid,
    MeasuredPoint,
    Point,
    SweepProgress,
    SweepResult,
    apply_point,
    point_key,
    read_sweep,
)
from specdec_core.models.loading import LoadedModel
from specdec_core.run.methods import Extra
from specdec_core.run.prompts import encode_prompt
from specdec_core.run.runner import load_extra
from specdec_core.tuning.tune import interrupted_point as first_missing


class Measure(Protocol):
    def __call__(
        self, method: str, config: DecodeConfig, reference: Sequence[Sequence[int]] | None
    ) -> Measurement:
        """The method's aggregate over the prompts and each prompt's token ids; `reference`
        is the baseline's token ids at that temperature (None: the run is the baseline)."""


def run_sweep(
    method: str,
    grid: Grid,
    base: DecodeConfig,
    measure: Measure,
    header: dict[str, Any] | None = None,
    json_out: Path | None = None,
    resume: bool = False,
    progress: Callable[[SweepProgress], None] | None = None,
    stop: StopFlag | None = None,
    baseline: str = "temperature",
) -> SweepResult:
    """Measure every point of `grid` not yet in `json_out` (with `resume`). `baseline`:
    'temperature' measures `ar` once per temperature, 'point' again before every point.
    `stop`: checked between points and, through a `BenchMeasure`, between the decode steps of
    every run inside a point; the point it cuts short is left out of the result."""
    if baseline not in BASELINES:
        raise SpecdecError(f"unknown baseline '{baseline}'; choose one of: {', '.join(BASELINES)}")
    fixed = {k: v for k, v in base.as_dict().items() if k not in grid.axes}
    header = {"method": method, "axes": grid.axes, "base_config": fixed, **(header or {})}
    result = SweepResult(header=header)
    if resume:
        result.points = _resumable(json_out, header)
    done = {point_key(p.point) for p in result.points}
    todo = [p for p in grid.points() if point_key(p) not in done]
    total = len(done) + len(todo)
    baselines: dict[float, Measurement] = {}
    if stop is not None and isinstance(measure, BenchMeasure):
        measure = measure.stopped_by(stop)  # the runs inside a point end within a step
    started = time.perf_counter()
    for index, point in enumerate(todo):
        if stop is not None and stop.is_set():
            break
        config = apply_point(base, point)
        try:
            ar = baselines.get(config.temperature) if baseline == "temperature" else None
            if ar is None:
                ar = baselines[config.temperature] = measure("ar", _baseline(config), None)
            metrics = measure(method, config, ar.token_ids)
        except MeasurementStopped:
            break
        record = _record(point, config, metrics, ar)
        result.points.append(record)
        if json_out is not None:
            result.write(json_out)
        if progress is not None:
            elapsed = time.perf_counter() - started
            eta = elapsed / (index + 1) * (len(todo) - index - 1)
            progress(SweepProgress(len(result.points), total, point, record, eta))
    return result


def interrupted_point(grid: Grid, result: SweepResult) -> Point | None:
    """The first point of `grid` that `result` lacks: the one a Stop cut short (or, when it
    came between points, the next); None when every point was measured."""
    return first_missing(grid, result.points)


def _baseline(config: DecodeConfig) -> DecodeConfig:
    """The autoregressive reference: the point's sampling settings, always lossless."""
    return config.lossless()


def _record(
    point: Point, config: DecodeConfig, metrics: Measurement, ar: Measurement
) -> MeasuredPoint:
    """The measured point: the method's aggregate, its speedup, and what it was run with."""
    ar_tps = ar.aggregate.tokens_per_second
    aggregate = replace(metrics.aggregate.against(ar_tps), phases=None)
    return MeasuredPoint(dict(point), config, aggregate, ar_tps)


def _resumable(json_out: Path | None, header: dict[str, Any]) -> list[MeasuredPoint]:
    if json_out is None:
        raise SpecdecError("--resume needs --json-out FILE (the file of the interrupted sweep)")
    if not json_out.is_file():
        return []
    saved = read_sweep(json_out, "pass another --json-out")
    fixed = [k for k in header if k not in ("axes", "environment")]
    changed = [k for k in fixed if saved.header.get(k) != header[k]]
    machine = (header.get("environment") or {}).get("machine")
    if machine != (saved.header.get("environment") or {}).get("machine", machine):
        changed.append("machine")  # speedups from two machines never share a file
    if changed:
        raise SpecdecError(
            f"{json_out} was measured with other settings ({', '.join(changed)} differ); "
            "rerun with the same settings, or pass another --json-out to start afresh"
        )
    return list(saved.points)


class BenchMeasure:
    """Measures a method on the prompts with the benchmark's runner (one model load each).
    With `stop`, every run decodes with it and a run it cuts short raises
    `MeasurementStopped` (so does a Stop during the warm-up before the first measurement)."""

    def __init__(
        self,
        target: LoadedModel,
        prompts: Sequence[str],
        specs: dict[str, str],
        raw: bool,
        extras: dict[str, Extra] | None = None,
        stop: StopFlag | None = None,
    ) -> None:
        """`extras`: already loaded draft / head per method (e.g. the GUI's), else from `specs`."""
        self.target = target
        self.specs = specs
        self.encoded = [encode_prompt(target.tokenizer, p, raw) for p in prompts]
        self.extras: dict[str, Extra] = dict(extras or {})
        # tree sizing's owners: each model timed once, each head's acceptance learned over
        # every point and prompt of this measurement
        self.costs, self.acceptance = ForwardCosts(), AcceptanceEstimates()
        self.stop = stop
        self._warm = [False]  # shared with `stopped_by` copies: one warm-up in all
        if stop is None:
            self._warm_up()

    def stopped_by(self, stop: StopFlag) -> BenchMeasure:
        """This measurement (its models, costs and acceptance shared) with `stop` in every run."""
        measure = copy.copy(self)
        measure.stop = stop
        return measure

    def _warm_up(self) -> None:
        if not self._warm[0]:
            warm_up(self.target, self.encoded[0], stop=self.stop)
            self._warm[0] = True

    def __call__(
        self, method: str, config: DecodeConfig, reference: Sequence[Sequence[int]] | None
    ) -> Measurement:
        self._warm_up()
        if method not in self.extras:
            self.extras[method] = load_extra(method, self.target, self.specs)
        rows = []
        history = History()  # this point's own: its runs of the earlier prompts
        for index, ids in enumerate(self.encoded):
            row = run_one(
                method, self.target, ids, config, self.extras[method], history=history,
                costs=self.costs, acceptance=self.acceptance, stop=self.stop,
            )  # fmt: skip
            rows.append(compared(row, row.token_ids if reference is None else reference[index]))
        return Measurement(aggregate(rows), tuple(row.token_ids for row in rows))
