"""The records of sweeps and Tune: grids of points, measured points, progress, results, tuning
tables.

A measured point is a `MeasuredPoint` from the measurement to the file: it becomes JSON only in
`SweepResult.write` / `as_dict` and comes back from it in `read_sweep` / `SweepResult.from_dict`
(files written before it existed read the same).

Torch-free, so the window (whose process never imports torch) can build a grid, show progress
and read a result the engine process measured; `sweep.py` and `autotune.py` measure.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.events import StepPhases
from specdec_core.errors import SpecdecError
from specdec_core.files import write_atomic

AXES = ("temperature", "k", "tree_tokens", "tree_depth", "tree_topk", "k_schedule")  # config fields
BASELINES = ("temperature", "point")  # how often `ar` is measured: per temperature, per point
PARAM_PREFIX = "policy_params."  # axis name of a policy parameter, e.g. policy_params.tau
METHOD_PREFIX = "method_params."  # of a method parameter, e.g. method_params.window
AxisValue = float | int | str | None  # one value of an axis (None: the engine chooses)
Point = Mapping[str, AxisValue]  # axis name -> value: one point of a grid


@dataclass(frozen=True)
class Grid:
    """Named axes -> values; `points()` is their cartesian product, temperature outermost."""

    axes: dict[str, list[Any]]

    def __post_init__(self) -> None:
        for name, values in self.axes.items():
            if name not in AXES and not name.startswith((PARAM_PREFIX, METHOD_PREFIX)):
                raise SpecdecError(f"cannot sweep '{name}'; choose from: {', '.join(AXES)}")
            if not values:
                raise SpecdecError(f"the sweep axis '{name}' has no values")
            if len(set(map(json.dumps, values))) != len(values):
                raise SpecdecError(f"the sweep axis '{name}' repeats a value: {values}")

    def points(self) -> list[Point]:
        names = sorted(self.axes, key=lambda n: (n != "temperature", _order(n)))
        combos = itertools.product(*(self.axes[n] for n in names))
        return [dict(zip(names, combo, strict=True)) for combo in combos]


def _order(name: str) -> int:
    return AXES.index(name) if name in AXES else len(AXES)


def apply_point(base: DecodeConfig, point: Point) -> DecodeConfig:
    """`base` with the point's values (policy parameters merged into `policy_params`, method
    parameters into `method_params`)."""
    params, method = dict(base.policy_params), dict(base.method_params)
    fields = {}
    for name, value in point.items():
        if name.startswith(PARAM_PREFIX):
            params[name.removeprefix(PARAM_PREFIX)] = value
        elif name.startswith(METHOD_PREFIX):
            method[name.removeprefix(METHOD_PREFIX)] = value
        else:
            fields[name] = value
    return replace(base, **fields, policy_params=params, method_params=method)


def point_key(point: Point) -> str:
    return json.dumps(point, sort_keys=True)


@dataclass(frozen=True)
class SpeedupSpread:
    """How a run's speedup spreads over its prompts. Prompts differ (a summary drafts well, a
    poem badly), so the interval says how much the run's speedup depends on which prompts
    were drawn, not how precise each timing was."""

    per_prompt: tuple[float, ...]  # each prompt's tokens/s over ar's on it, in prompt order
    interval: tuple[float, float]  # (low, high): 95 % bootstrap interval of the run's speedup


@dataclass(frozen=True)
class Aggregate:
    """A method over several prompts: sums of tokens and time, prompt means of fidelity."""

    tokens_per_second: float
    mean_accept_length: float
    identical_to_ar: float = 0.0  # share of prompts whose output equals ar's
    prompts: int = 0
    new_tokens: int = 0
    steps: int = 0
    wall_seconds: float = 0.0
    draft_ms_per_step: float | None = None
    verify_ms_per_step: float | None = None
    lossy: bool = False
    tree: str | None = None  # the tree size a tree method chose, on the last prompt
    prefix_agreement: float | None = None
    token_agreement: float | None = None
    mean_logprob: float | None = None
    near_ties: int = 0  # prompts whose output parts from ar's at a float near-tie
    bugs: int = 0  # prompts whose output parts from ar's where no rounding explains it
    identical_to_fp32: float | None = None  # share identical to an fp32 ar reference
    speedup_vs_ar: float | None = None  # set by the caller that measured ar in the same run
    phases: StepPhases | None = None  # every row's step phases summed; None if a row has none
    speedup_interval: tuple[float, float] | None = None  # 95 % over prompts (SpeedupSpread)
    speedup_per_prompt: tuple[float, ...] | None = None  # each prompt's, in prompt order

    def against(
        self, ar_tokens_per_second: float, spread: SpeedupSpread | None = None
    ) -> Aggregate:
        """This aggregate with its speedup over an `ar` measured in the same run, and with
        `spread` its speedup per prompt and interval (`speedup_spread`)."""
        speedup = self.tokens_per_second / ar_tokens_per_second if ar_tokens_per_second else 0.0
        if spread is None:
            return replace(self, speedup_vs_ar=speedup)
        return replace(
            self,
            speedup_vs_ar=speedup,
            speedup_interval=spread.interval,
            speedup_per_prompt=spread.per_prompt,
        )

    def to_record(self) -> dict[str, Any]:
        """Every field but the phases (`bench --profile` adds them: step_profile.py); the
        speedup's interval and per-prompt values only where it has them (bench entries, not
        sweep points)."""
        record = asdict(self)
        del record["phases"]
        for name in ("speedup_interval", "speedup_per_prompt"):
            if record[name] is None:
                del record[name]
        return record


@dataclass(frozen=True)
class MeasuredPoint:
    """One measured point of a sweep: its axes' values, the settings it ran with, the method's
    `Aggregate` over the prompts (its speedup set against the `ar` of the same run) and the
    `ar` speed that speedup divides."""

    point: Point
    config: DecodeConfig
    aggregate: Aggregate
    ar_tokens_per_second: float = 0.0  # the baseline measured in the same process

    @property
    def temperature(self) -> float:
        return self.config.temperature

    @property
    def speedup_vs_ar(self) -> float:
        return self.aggregate.speedup_vs_ar or 0.0

    @property
    def mean_accept_length(self) -> float:  # τ
        return self.aggregate.mean_accept_length

    def fidelity(self) -> dict[str, float]:
        """The fidelity numbers this point has (agreement with ar's output, target log-prob)."""
        a = self.aggregate
        values = {
            "prefix_agreement": a.prefix_agreement,
            "token_agreement": a.token_agreement,
            "mean_logprob": a.mean_logprob,
        }
        return {name: value for name, value in values.items() if value is not None}

    def to_record(self) -> dict[str, Any]:
        """The JSON form of a sweep file's point (the keys of the CLI contract): the aggregate's
        keys, then `point`, `config` and `ar_tokens_per_second`."""
        record = self.aggregate.to_record()
        record["speedup_vs_ar"] = self.speedup_vs_ar
        record.update(
            point=dict(self.point),
            config=asdict(self.config),
            ar_tokens_per_second=self.ar_tokens_per_second,
        )
        return record

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> MeasuredPoint:
        """A point as a sweep file holds it (files of earlier versions too); keys this version
        does not know are skipped."""
        names = {f.name for f in fields(Aggregate)} - {"phases"}
        values = {name: value for name, value in record.items() if name in names}
        values.setdefault("tokens_per_second", 0.0)  # files of the first versions lack it
        for name in ("speedup_interval", "speedup_per_prompt"):
            if values.get(name) is not None:
                values[name] = tuple(values[name])
        config_names = {f.name for f in fields(DecodeConfig)}
        saved = record["config"]
        config = DecodeConfig(**{k: v for k, v in saved.items() if k in config_names})
        return cls(
            point=dict(record["point"]),
            config=config,
            aggregate=Aggregate(**values),
            ar_tokens_per_second=record.get("ar_tokens_per_second", 0.0),
        )


@dataclass
class SweepProgress:
    done: int  # points finished, including those resumed from the file
    total: int
    point: Point
    record: MeasuredPoint
    eta_seconds: float | None  # from the points measured in this process


@dataclass
class SweepResult:
    header: dict[str, Any]
    points: list[MeasuredPoint] = field(default_factory=list)

    def best(self, temperature: float | None = None) -> MeasuredPoint | None:
        rows = [p for p in self.points if temperature is None or p.temperature == temperature]
        return max(rows, key=lambda p: p.speedup_vs_ar, default=None)

    def best_by_temperature(self) -> dict[float, MeasuredPoint]:
        """The fastest point at each measured temperature, temperatures ascending."""
        temperatures = sorted({p.temperature for p in self.points})
        return {t: best for t in temperatures if (best := self.best(t)) is not None}

    def as_dict(self) -> dict[str, Any]:
        best = self.best()
        return {
            "sweep": self.header,
            "points": [p.to_record() for p in self.points],
            "best": best.to_record() if best is not None else None,
            "best_by_temperature": {
                str(t): p.to_record() for t, p in self.best_by_temperature().items()
            },
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SweepResult:
        """The result of a sweep file's JSON (`best` is recomputed from the points)."""
        return cls(
            header=dict(data["sweep"]),
            points=[MeasuredPoint.from_record(p) for p in data["points"]],
        )

    def write(self, path: Path) -> None:
        """Write atomically, so an interrupt during the write never corrupts earlier points."""
        write_atomic(path, json.dumps(self.as_dict(), indent=2))


def read_sweep(path: str | Path, what_to_do: str = "pass another file") -> SweepResult:
    """The sweep result in the JSON file at `path` (any version of the format)."""
    try:
        result = SweepResult.from_dict(json.loads(Path(path).read_text()))
    except (OSError, json.JSONDecodeError, KeyError, TypeError, AttributeError):
        result = None
    if result is None or "method" not in result.header:
        raise SpecdecError(f"{path} is not a `specdec sweep` result (JSON); {what_to_do}")
    return result


@dataclass(frozen=True)
class TuneRow:
    """One measured value of the tuned setting (k, or a tree's size in tokens): its speed, the
    `ar` speed it was divided by, and τ."""

    k: int  # the value of the tuned setting
    tokens_per_second: float
    speedup_vs_ar: float
    mean_accept_length: float
    ar_tokens_per_second: float


@dataclass(frozen=True)
class TuneResult:
    method: str
    table: tuple[TuneRow, ...]  # one row per candidate value
    k: int  # the chosen value of `setting` (stopped: the one it was given)
    reason: str
    stopped: bool = False  # Stop came before every candidate was measured
    setting: str = "k"  # what was tuned: k (a chain) or tree_tokens (a tree)

    def format_table(self) -> str:
        name = "tokens" if self.setting == "tree_tokens" else self.setting
        width = max(3, len(name))
        lines = [f"{name:>{width}}{'tok/s':>9}{'speedup':>9}{'tau':>7}", "-" * (25 + width)]
        for row in self.table:
            mark = "  <- chosen" if row.k == self.k else ""
            lines.append(
                f"{row.k:>{width}}{row.tokens_per_second:>9.1f}{row.speedup_vs_ar:>8.2f}x"
                f"{row.mean_accept_length:>7.2f}{mark}"
            )
        return "\n".join(lines)
