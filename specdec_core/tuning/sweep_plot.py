"""PNG of a sweep result: a heatmap of speedup over two axes, or a curve over one.

Drawn with matplotlib's object API (`Figure`, no pyplot, no GUI backend), so it runs headless and
never touches Qt — the engine must not import Qt (docs/architecture.md#layers), which rules out
pyqtgraph's exporter here. matplotlib is a dependency for this one file; the GUI draws its own live
plots with pyqtgraph from the same JSON.

Layout: the temperature is the heatmap's rows when it varies, the first other varying axis its
columns; any further varying axis is folded by taking the best speedup over it (the title says
so). Each cell shows speedup and τ. A sweep whose points carry fidelity numbers (a lossy
policy's agreement with greedy output or target log-prob) gets a second panel: τ against each.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specdec_core.errors import SpecdecError
from specdec_core.measurement.sweep_records import MeasuredPoint, SweepResult


def render_png(result: SweepResult, path: str | Path) -> None:
    """Write the PNG for `result` (measured here, or read back from its JSON: `read_sweep`)."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise SpecdecError(
            "--png-out needs matplotlib; install it with `pip install matplotlib` "
            "(the JSON result is complete without it)"
        ) from None
    points = result.points
    if not points:
        raise SpecdecError("the sweep has no finished points to plot")
    varying = [n for n, values in result.header["axes"].items() if len(values) > 1]
    fidelity = list(points[0].fidelity()) if any(p.aggregate.lossy for p in points) else []
    figure = Figure(figsize=(6.5 * (1 + bool(fidelity)), 4.8), layout="constrained")
    axes = figure.subplots(1, 1 + bool(fidelity), squeeze=False)[0]
    title = f"{result.header['method']}: speedup vs ar"
    if len(varying) >= 2:
        _heatmap(axes[0], points, varying, figure)
        title += _folded_note(varying)
    else:
        _curve(axes[0], points, varying[0] if varying else None)
    axes[0].set_title(title)
    if fidelity:
        _fidelity(axes[1], points, fidelity)
    figure.savefig(path, dpi=110)


def _value(measured: MeasuredPoint, axis: str) -> Any:
    return measured.point.get(axis)


def _label(value: Any) -> str:
    return "auto" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def _heatmap_axes(varying: list[str]) -> tuple[str, str, list[str]]:
    """(rows axis, columns axis, folded axes) for two or more varying axes."""
    rows_axis = "temperature" if "temperature" in varying else varying[1]
    cols_axis = next(n for n in varying if n != rows_axis)
    return rows_axis, cols_axis, [n for n in varying if n not in (rows_axis, cols_axis)]


def _heatmap(ax, points: list[MeasuredPoint], varying: list[str], figure) -> None:
    from matplotlib.colors import TwoSlopeNorm

    rows_axis, cols_axis, _ = _heatmap_axes(varying)
    rows = sorted({_value(p, rows_axis) for p in points}, key=_sortable)
    cols = sorted({_value(p, cols_axis) for p in points}, key=_sortable)
    best: dict[tuple[Any, Any], MeasuredPoint] = {}
    for p in points:  # fold the other axes: keep the best speedup per cell
        cell = (_value(p, rows_axis), _value(p, cols_axis))
        if cell not in best or p.speedup_vs_ar > best[cell].speedup_vs_ar:
            best[cell] = p
    grid = [[_speedup(best.get((r, c))) for c in cols] for r in rows]
    values = [v for row in grid for v in row if v == v]  # drop NaN (cells not measured)
    low, high = min([0.5, *values]), max([1.5, *values])
    norm = TwoSlopeNorm(vcenter=1.0, vmin=low, vmax=high)  # red below ar, green above
    image = ax.imshow(grid, cmap="RdYlGn", norm=norm, aspect="auto")
    for i, r in enumerate(rows):
        for j, c in enumerate(cols):
            if (r, c) in best:
                p = best[(r, c)]
                text = f"{p.speedup_vs_ar:.2f}x\nτ {p.mean_accept_length:.2f}"
                ax.text(j, i, text, ha="center", va="center", fontsize=8)
    ax.set_xticks(range(len(cols)), [_label(c) for c in cols])
    ax.set_yticks(range(len(rows)), [_label(r) for r in rows])
    ax.set_xlabel(cols_axis)
    ax.set_ylabel(rows_axis)
    figure.colorbar(image, ax=ax, label="speedup vs ar")


def _speedup(measured: MeasuredPoint | None) -> float:
    """A cell's speedup; NaN where no point was measured (drawn blank)."""
    return measured.speedup_vs_ar if measured is not None else float("nan")


def _curve(ax, points: list[MeasuredPoint], axis: str | None) -> None:
    ordered = sorted(points, key=lambda p: _sortable(_value(p, axis))) if axis else points
    xs = [_label(_value(p, axis)) for p in ordered] if axis else ["(one point)"]
    ax.plot(xs, [p.speedup_vs_ar for p in ordered], "o-", color="tab:green", label="speedup")
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    ax.set_xlabel(axis or "")
    ax.set_ylabel("speedup vs ar")
    tau = ax.twinx()
    tau.plot(xs, [p.mean_accept_length for p in ordered], "s--", color="tab:blue")
    tau.set_ylabel("τ (mean accepted length)", color="tab:blue")


def _fidelity(ax, points: list[MeasuredPoint], keys: list[str]) -> None:
    """τ against agreement (left axis, 0..1) and target log-prob (right axis)."""
    taus = [p.mean_accept_length for p in points]
    labels = [",".join(_label(v) for v in p.point.values()) for p in points]
    logprob = ax.twinx()
    colors = ("tab:blue", "tab:orange", "tab:red", "tab:purple")
    for key, marker, color in zip(keys, "os^v", colors, strict=False):
        side = logprob if "logprob" in key else ax
        values = [p.fidelity().get(key, float("nan")) for p in points]
        side.plot(taus, values, marker, color=color, linestyle="none", label=key)
        for tau, value, label in zip(taus, values, labels, strict=True):
            side.annotate(label, (tau, value), fontsize=7)
    ax.set_xlabel("τ (mean accepted length)")
    ax.set_ylabel("agreement with greedy ar")
    logprob.set_ylabel("mean target log-prob")
    ax.set_title("price of lossy acceptance")
    handles = ax.get_legend_handles_labels()[0] + logprob.get_legend_handles_labels()[0]
    ax.legend(handles=handles, fontsize=8)


def _folded_note(varying: list[str]) -> str:
    folded = _heatmap_axes(varying)[2]
    return f" (best over {', '.join(folded)})" if folded else ""


def _sortable(value: Any) -> tuple[int, float, str]:
    """Numbers ascending, then names, then None ('auto')."""
    if value is None:
        return (2, 0.0, "")
    return (1, 0.0, value) if isinstance(value, str) else (0, float(value), "")
