"""Tune's choice: the values each tuned setting is measured at, and the pick from the table.

Torch-free, so the window (whose process never imports torch) can build a method parameter's
grid and read the result, and `autotune.py` (which measures) shares the same rule.

What is tuned: the draft length k (chains), a tree's size in tokens (tree methods), or one of
the method's own parameters (`DecodeConfig.method_params`, the sweep's `method_params.NAME`
axis): layer-skip's `exit_layer` (a quarter, half and three quarters of the target's depth),
SWIFT's `skip_ratio`, lookahead's `window` and `ngram_size`, the DFlash block of `dflash` and
`ddtree` (`block`: rows of a block, 3 to 8; a drafter trained on shorter blocks refuses the longer
ones in one line) (`METHOD_PARAM_CANDIDATES`). The choice
is the value with the highest speedup; a tie (within `TIE`, well inside timing noise) goes to
the smaller value. A tuning that Stop cut short picks nothing: it keeps the value it was given,
and its table (`stopped_table`) labels the value cut short and those never measured.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from specdec_core.errors import SpecdecError
from specdec_core.measurement.sweep_records import (
    METHOD_PREFIX,
    AxisValue,
    Grid,
    MeasuredPoint,
    Point,
    TuneResult,
    TuneRow,
    point_key,
)

CANDIDATES = (1, 2, 3, 4, 6, 8)  # draft lengths k
TREE_CANDIDATES = (4, 8, 16, 32)  # tree sizes in tokens, for a tree method
# each method's parameters that Tune offers, and their values (None: from the target's depth,
# `EXIT_FRACTIONS`); a name means what its method's drafter says (SWIFT's `window` is its
# scoring window, lookahead's its Jacobi window), so the table is per method
METHOD_PARAM_CANDIDATES: dict[str, dict[str, tuple[float, ...] | None]] = {
    "layer-skip": {"exit_layer": None},
    "swift": {"skip_ratio": (0.3, 0.45, 0.6)},
    "lookahead": {"window": (2, 3, 4, 6), "ngram_size": (3, 4, 5)},
    "dflash": {"block": (3, 4, 6, 8)},
    "ddtree": {"block": (3, 4, 6, 8)},
}
EXIT_FRACTIONS = (0.25, 0.5, 0.75)  # exit layers measured, as shares of the target's layers
TIE = 0.01  # speedups within 1% of the best count as a tie
TUNING_MAX_NEW_TOKENS = 48
TUNING_PROMPTS = (  # short, varied chat prompts: prose, code, a list
    "Explain in a few sentences why the sky is blue.",
    "Write a Python function that returns the n-th Fibonacci number.",
    "List five tips for writing clear technical documentation.",
)


def tune_grid(tree: bool, candidates: Sequence[int] | None = None) -> Grid:
    """What Tune k measures, in the order it measures it: a chain's k (`CANDIDATES` by
    default), a tree's size in tokens (`TREE_CANDIDATES`); the window shows its progress from
    the same grid."""
    setting = "tree_tokens" if tree else "k"
    default = TREE_CANDIDATES if tree else CANDIDATES
    return Grid({setting: sorted(set(candidates or default))})


def stopped_table(result: TuneResult, grid: Grid) -> str:
    """A stopped Tune's table: the values measured (none chosen: it keeps what it was given),
    then the value Stop cut short and those never measured, each labelled so."""
    name = "tokens" if result.setting == "tree_tokens" else setting_name(result.setting)
    width = max(3, len(name))
    lines = [f"{name:>{width}}{'tok/s':>9}{'speedup':>9}{'tau':>7}", "-" * (25 + width)]
    measured = {row.k: row for row in result.table}
    cut = True  # the first value not measured is the one Stop cut short
    for point in grid.points():
        value = point[result.setting]
        row = measured.get(value)
        if row is not None:
            lines.append(
                f"{row.k:>{width}}{row.tokens_per_second:>9.1f}{row.speedup_vs_ar:>8.2f}x"
                f"{row.mean_accept_length:>7.2f}"
            )
            continue
        lines.append(f"{value:>{width}}  {'stopped (cut short)' if cut else 'not measured'}")
        cut = False
    return "\n".join(lines)


def tunable_params(method: str, params: Sequence[tuple[str, float]]) -> tuple[str, ...]:
    """The parameters of `method` (its `params`: names and defaults) that Tune offers, in the
    method's order."""
    offered = METHOD_PARAM_CANDIDATES.get(method, {})
    return tuple(name for name, _ in params if name in offered)


def param_axis(name: str) -> str:
    """The sweep axis of method parameter `name`: 'method_params.window'."""
    return f"{METHOD_PREFIX}{name}"


def setting_name(setting: str) -> str:
    """A tuned setting as a user names it: 'window' for 'method_params.window'."""
    return setting.removeprefix(METHOD_PREFIX)


def num_layers(model_config: Mapping) -> int | None:
    """The decoder layers of a target's config.json (a multimodal one: its text config's)."""
    text = model_config.get("text_config") or {}
    layers = model_config.get("num_hidden_layers") or text.get("num_hidden_layers")
    return int(layers) if layers else None


def param_candidates(method: str, name: str, layers: int | None = None) -> list[AxisValue]:
    """The values Tune measures `method`'s parameter `name` at (`layers`: the target's depth,
    which an exit layer's values need)."""
    offered = METHOD_PARAM_CANDIDATES.get(method, {})
    if name not in offered:
        choices = ", ".join(offered) or "none"
        raise SpecdecError(f"Tune offers no values of {method}'s '{name}'; it offers: {choices}")
    values = offered[name]
    if values is not None:
        return list(values)
    if not layers or layers < 2:
        raise SpecdecError(
            f"tuning {name} needs the target's layer count; load a target whose config.json "
            "names num_hidden_layers"
        )
    return sorted({min(layers - 1, max(1, round(layers * f))) for f in EXIT_FRACTIONS})


def choose_k(table: Sequence[TuneRow], setting: str = "k") -> tuple[AxisValue, str]:
    """The value with the highest speedup (ties within `TIE` go to the smaller one), and why."""
    if not table:
        raise SpecdecError("auto-tune measured nothing; check the prompts and the method")
    name = setting_name(setting)
    best = max(table, key=lambda row: row.speedup_vs_ar)
    near = [row for row in table if row.speedup_vs_ar >= best.speedup_vs_ar * (1 - TIE)]
    chosen = min(near, key=lambda row: row.k)
    reason = (
        f"{name}={chosen.k}: {chosen.speedup_vs_ar:.2f}x vs ar "
        f"(τ {chosen.mean_accept_length:.2f}), the highest measured speedup"
    )
    if chosen is not best:
        reason += (
            f" within {TIE:.0%} of {name}={best.k} ({best.speedup_vs_ar:.2f}x); the smaller "
            f"{name} wins ties"
        )
    if chosen.speedup_vs_ar < 1.0:
        reason += f"; no {name} beat ar here: with this drafter on this device, `ar` is faster"
    return chosen.k, reason


def tune_row(measured: MeasuredPoint, setting: str = "k") -> TuneRow:
    """A measured sweep point as a row of the tuning table."""
    return TuneRow(
        k=measured.point[setting],
        tokens_per_second=measured.aggregate.tokens_per_second,
        speedup_vs_ar=measured.speedup_vs_ar,
        mean_accept_length=measured.mean_accept_length,
        ar_tokens_per_second=measured.ar_tokens_per_second,
    )


def interrupted_point(grid: Grid, points: Sequence[MeasuredPoint]) -> Point | None:
    """The first point of `grid` that `points` lack: the one a Stop cut short (or, when it
    came between points, the next); None when every point was measured."""
    done = {point_key(p.point) for p in points}
    return next((p for p in grid.points() if point_key(p) not in done), None)


def tune_result(
    method: str,
    setting: str,
    grid: Grid,
    points: Sequence[MeasuredPoint],
    given: AxisValue,
) -> TuneResult:
    """The tuning of `setting` from a sweep over it: the chosen value, or, when the sweep
    stopped before every point, a stopped result that keeps `given`."""
    table = tuple(tune_row(measured, setting) for measured in points)
    if len(table) < len(grid.points()):
        cut = interrupted_point(grid, points)
        cut_short = cut[setting] if cut is not None else None
        return stopped_result(method, table, given, len(grid.points()), setting, cut_short)
    value, reason = choose_k(table, setting)
    return TuneResult(method=method, table=table, k=value, reason=reason, setting=setting)


def stopped_result(
    method: str,
    table: tuple[TuneRow, ...],
    given: AxisValue,
    total: int,
    setting: str = "k",
    cut_short: AxisValue = None,
) -> TuneResult:
    """The result of a tuning stopped after `len(table)` of `total` candidates, during the
    measurement of `cut_short` (None: not known)."""
    name = setting_name(setting)
    shown = "auto" if given is None else given
    reason = f"stopped after {len(table)} of {total} values of {name}"
    if cut_short is not None:
        reason += f" (Stop cut {name}={cut_short} short; it is not in the table)"
    reason += f"; {name} stays {shown}"
    if table:
        best = max(table, key=lambda row: row.speedup_vs_ar)
        reason += f" (the best measured: {name}={best.k}, {best.speedup_vs_ar:.2f}x vs ar)"
    return TuneResult(method, table, given, reason, stopped=True, setting=setting)
