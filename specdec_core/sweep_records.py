"""The records of sweeps and Tune: grids of points, progress, results, tuning tables.

Torch-free, so the window (whose process never imports torch) can build a grid, show
progress and read a result the engine process measured; `sweep.py` and `autotune.py` measure.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from specdec_core.config import DecodeConfig
from specdec_core.errors import SpecdecError
from specdec_core.files import write_atomic

AXES = ("temperature", "k", "tree_tokens", "tree_depth", "tree_topk", "k_schedule")  # config fields
BASELINES = ("temperature", "point")  # how often `ar` is measured: per temperature, per point
PARAM_PREFIX = "policy_params."  # axis name of a policy parameter, e.g. policy_params.tau
Point = dict[str, Any]


@dataclass(frozen=True)
class Grid:
    """Named axes -> values; `points()` is their cartesian product, temperature outermost."""

    axes: dict[str, list[Any]]

    def __post_init__(self) -> None:
        for name, values in self.axes.items():
            if name not in AXES and not name.startswith(PARAM_PREFIX):
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
    """`base` with the point's values (policy parameters merged into `policy_params`)."""
    params = dict(base.policy_params)
    fields = {}
    for name, value in point.items():
        if name.startswith(PARAM_PREFIX):
            params[name.removeprefix(PARAM_PREFIX)] = value
        else:
            fields[name] = value
    return replace(base, **fields, policy_params=params)


def point_key(point: Point) -> str:
    return json.dumps(point, sort_keys=True)


@dataclass
class SweepProgress:
    done: int  # points finished, including those resumed from the file
    total: int
    point: Point
    record: dict[str, Any]
    eta_seconds: float | None  # from the points measured in this process


@dataclass
class SweepResult:
    header: dict[str, Any]
    points: list[dict[str, Any]] = field(default_factory=list)

    def best(self, temperature: float | None = None) -> dict[str, Any] | None:
        rows = [r for r in self.points if temperature is None or _temp(r) == temperature]
        return max(rows, key=lambda r: r["speedup_vs_ar"], default=None)

    def as_dict(self) -> dict[str, Any]:
        temperatures = sorted({_temp(r) for r in self.points})
        return {
            "sweep": self.header,
            "points": self.points,
            "best": self.best(),
            "best_by_temperature": {str(t): self.best(t) for t in temperatures},
        }

    def write(self, path: Path) -> None:
        """Write atomically, so an interrupt during the write never corrupts earlier points."""
        write_atomic(path, json.dumps(self.as_dict(), indent=2))


def _temp(record: dict[str, Any]) -> float:
    return record["config"]["temperature"]


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
