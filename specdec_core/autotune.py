"""Auto-tune the draft length k: a short sweep on this device, then the argmax of its table.

`--k auto` (generate / bench) and the GUI's "Tune" action call `autotune_k`. It measures each
candidate k on a few short prompts with the current models, temperature and policy — a sweep
(`specdec_core.sweep`) over k alone, speedup as a ratio to `ar` measured in the same run — and
returns the whole table, the chosen k and a sentence saying why. The choice is the row with the
highest speedup; a tie (within 1%, well inside timing noise) goes to the smaller k, which drafts
less and wastes less when acceptance drops.

Only chain drafters have a k: for a tree method (EAGLE-2 and its merges) the window's Tune
tunes the tree's size in tokens the same way (`TREE_CANDIDATES`, depth and top-k sized for each
on this device); `--k auto` stays for chains.

A stop flag (the GUI's Stop) ends the tuning within one decode step: it reaches the runs of
the point being measured (sweep.py), which is dropped; the result then holds the rows measured
before it, `stopped` set, its reason names the value Stop cut short, and it keeps the k it was
given (a partial table picks no k).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from specdec_core.config import DecodeConfig
from specdec_core.control import StopFlag
from specdec_core.errors import SpecdecError
from specdec_core.methods import Extra, is_tree
from specdec_core.models import LoadedModel
from specdec_core.sweep import (
    BenchMeasure,
    Grid,
    Measure,
    SweepProgress,
    interrupted_point,
    run_sweep,
)
from specdec_core.sweep_records import MeasuredPoint, TuneResult, TuneRow

CANDIDATES = (1, 2, 3, 4, 6, 8)
TREE_CANDIDATES = (4, 8, 16, 32)  # tree sizes in tokens, for a tree method
TIE = 0.01  # speedups within 1% of the best count as a tie
TUNING_MAX_NEW_TOKENS = 48
TUNING_PROMPTS = (  # short, varied chat prompts: prose, code, a list
    "Explain in a few sentences why the sky is blue.",
    "Write a Python function that returns the n-th Fibonacci number.",
    "List five tips for writing clear technical documentation.",
)


def choose_k(table: Sequence[TuneRow], setting: str = "k") -> tuple[int, str]:
    """The value with the highest speedup (ties within `TIE` go to the smaller one), and why."""
    if not table:
        raise SpecdecError("auto-tune measured nothing; check the prompts and the method")
    best = max(table, key=lambda row: row.speedup_vs_ar)
    near = [row for row in table if row.speedup_vs_ar >= best.speedup_vs_ar * (1 - TIE)]
    chosen = min(near, key=lambda row: row.k)
    reason = (
        f"{setting}={chosen.k}: {chosen.speedup_vs_ar:.2f}x vs ar "
        f"(τ {chosen.mean_accept_length:.2f}), the highest measured speedup"
    )
    if chosen is not best:
        reason += (
            f" within {TIE:.0%} of {setting}={best.k} ({best.speedup_vs_ar:.2f}x); the smaller "
            f"{setting} wins ties"
        )
    if chosen.speedup_vs_ar < 1.0:
        reason += f"; no {setting} beat ar here: with this drafter on this device, `ar` is faster"
    return chosen.k, reason


def tuned_setting(method: str) -> str:
    """What Tune measures for `method`: `k` for a chain, `tree_tokens` for a tree."""
    return "tree_tokens" if is_tree(method) else "k"


def autotune_k(
    method: str,
    config: DecodeConfig,
    measure: Measure,
    candidates: Sequence[int] | None = None,
    progress: Callable[[SweepProgress], None] | None = None,
    stop: StopFlag | None = None,
) -> TuneResult:
    """Measure `method` at each candidate k (a tree: each tree size, `TREE_CANDIDATES` by
    default), all else as in `config`, and pick the best; `stop` ends it within a decode step
    of the point being measured (a `stopped` result, the setting unchanged)."""
    if method == "ar":
        check_tunable(method)
    setting = tuned_setting(method)
    default = TREE_CANDIDATES if setting == "tree_tokens" else CANDIDATES
    grid = Grid({setting: sorted(set(candidates or default))})
    result = run_sweep(method, grid, config, measure, progress=progress, stop=stop)
    table = tuple(_row(measured, setting) for measured in result.points)
    given = config.tree_tokens if setting == "tree_tokens" else config.k
    if len(table) < len(grid.points()):
        cut = interrupted_point(grid, result)
        cut_short = cut[setting] if cut is not None else None
        return _stopped(method, table, given, len(grid.points()), setting, cut_short)
    k, reason = choose_k(table, setting)
    return TuneResult(method=method, table=table, k=k, reason=reason, setting=setting)


def _stopped(
    method: str,
    table: tuple[TuneRow, ...],
    k: int | None,
    total: int,
    setting: str = "k",
    cut_short: int | None = None,
) -> TuneResult:
    """The result of a tuning stopped after `len(table)` of `total` candidates, during the
    measurement of `cut_short` (None: not known)."""
    shown = "auto" if k is None else k
    reason = f"stopped after {len(table)} of {total} values of {setting}"
    if cut_short is not None:
        reason += f" (Stop cut {setting}={cut_short} short; it is not in the table)"
    reason += f"; {setting} stays {shown}"
    if table:
        best = max(table, key=lambda row: row.speedup_vs_ar)
        reason += f" (the best measured: {setting}={best.k}, {best.speedup_vs_ar:.2f}x vs ar)"
    return TuneResult(method, table, k, reason, stopped=True, setting=setting)


def tune_on_device(
    target: LoadedModel,
    method: str,
    config: DecodeConfig,
    specs: dict[str, str],
    prompts: Sequence[str] = TUNING_PROMPTS,
    candidates: Sequence[int] | None = None,
    progress: Callable[[SweepProgress], None] | None = None,
    extra: Extra = None,
    stop: StopFlag | None = None,
    trees: bool = False,
) -> TuneResult:
    """`autotune_k` with the real models: short runs (`TUNING_MAX_NEW_TOKENS`) on `prompts`.
    `extra` is the method's draft / head if already loaded (the GUI's Tune), else from `specs`;
    `stop` ends it within a decode step (the warm-up run included); `trees`: a tree method
    tunes its size (the GUI's Tune; `--k auto` has a k to set, so it refuses trees)."""
    if not trees or method == "ar":
        check_tunable(method)
    short = replace(config, max_new_tokens=min(config.max_new_tokens, TUNING_MAX_NEW_TOKENS))
    extras = {method: extra} if extra is not None else None
    measure = BenchMeasure(target, prompts, specs, raw=False, extras=extras, stop=stop)
    return autotune_k(method, short, measure, candidates, progress, stop)


def check_tunable(method: str) -> None:
    if method == "ar":
        raise SpecdecError("--k auto needs a speculative method; 'ar' drafts nothing")
    if is_tree(method):  # a tree has no chain length k to tune
        raise SpecdecError(
            f"--k auto tunes chain drafters; '{method}' drafts a tree: "
            f"use `specdec sweep --method {method} --tree-tokens ... --tree-depth ...`"
        )


def _row(measured: MeasuredPoint, setting: str = "k") -> TuneRow:
    """A measured sweep point as a row of the tuning table."""
    return TuneRow(
        k=measured.point[setting],
        tokens_per_second=measured.aggregate.tokens_per_second,
        speedup_vs_ar=measured.speedup_vs_ar,
        mean_accept_length=measured.mean_accept_length,
        ar_tokens_per_second=measured.ar_tokens_per_second,
    )
