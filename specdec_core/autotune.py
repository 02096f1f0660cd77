"""Auto-tune the draft length k: a short sweep on this device, then the argmax of its table.

`--k auto` (generate / bench) and the GUI's "Tune" action call `autotune_k`. It measures each
candidate k on a few short prompts with the current models, temperature and policy — a sweep
(`specdec_core.sweep`) over k alone, speedup as a ratio to `ar` measured in the same run — and
returns the whole table, the chosen k and a sentence saying why. The choice is the row with the
highest speedup; a tie (within 1%, well inside timing noise) goes to the smaller k, which drafts
less and wastes less when acceptance drops.

Only chain drafters have a k; a tree method (EAGLE-2) is tuned with a sweep over its tree size.

A stop flag (the GUI's Stop) ends the tuning after the point being measured: the result then
holds the rows measured so far, `stopped` set, and keeps the k it was given (a partial table
picks no k).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from specdec_core.config import DecodeConfig
from specdec_core.control import StopFlag
from specdec_core.errors import SpecdecError
from specdec_core.methods import Extra, is_tree
from specdec_core.models import LoadedModel
from specdec_core.sweep import BenchMeasure, Grid, Measure, SweepProgress, run_sweep
from specdec_core.sweep_records import TuneResult, TuneRow

CANDIDATES = (1, 2, 3, 4, 6, 8)
TIE = 0.01  # speedups within 1% of the best count as a tie
TUNING_MAX_NEW_TOKENS = 48
TUNING_PROMPTS = (  # short, varied chat prompts: prose, code, a list
    "Explain in a few sentences why the sky is blue.",
    "Write a Python function that returns the n-th Fibonacci number.",
    "List five tips for writing clear technical documentation.",
)


def choose_k(table: Sequence[TuneRow]) -> tuple[int, str]:
    """The k with the highest speedup (ties within `TIE` go to the smaller k), and why."""
    if not table:
        raise SpecdecError("auto-tune measured nothing; check the prompts and the method")
    best = max(table, key=lambda row: row.speedup_vs_ar)
    near = [row for row in table if row.speedup_vs_ar >= best.speedup_vs_ar * (1 - TIE)]
    chosen = min(near, key=lambda row: row.k)
    reason = (
        f"k={chosen.k}: {chosen.speedup_vs_ar:.2f}x vs ar "
        f"(τ {chosen.mean_accept_length:.2f}), the highest measured speedup"
    )
    if chosen is not best:
        reason += (
            f" within {TIE:.0%} of k={best.k} ({best.speedup_vs_ar:.2f}x); the smaller k wins ties"
        )
    if chosen.speedup_vs_ar < 1.0:
        reason += "; no k beat ar here: with this drafter on this device, `ar` is faster"
    return chosen.k, reason


def autotune_k(
    method: str,
    config: DecodeConfig,
    measure: Measure,
    candidates: Sequence[int] = CANDIDATES,
    progress: Callable[[SweepProgress], None] | None = None,
    stop: StopFlag | None = None,
) -> TuneResult:
    """Measure `method` at each candidate k (all else as in `config`) and pick the best;
    `stop` ends it after the point being measured (a `stopped` result, k unchanged)."""
    check_tunable(method)
    grid = Grid({"k": sorted(set(candidates))})
    result = run_sweep(method, grid, config, measure, progress=progress, stop=stop)
    table = tuple(_row(record) for record in result.points)
    if len(table) < len(grid.points()):
        return _stopped(method, table, config.k, len(grid.points()))
    k, reason = choose_k(table)
    return TuneResult(method=method, table=table, k=k, reason=reason)


def _stopped(method: str, table: tuple[TuneRow, ...], k: int, total: int) -> TuneResult:
    """The result of a tuning stopped after `len(table)` of `total` candidates."""
    reason = f"stopped after {len(table)} of {total} values of k; k stays {k}"
    if table:
        best = max(table, key=lambda row: row.speedup_vs_ar)
        reason += f" (the best measured: k={best.k}, {best.speedup_vs_ar:.2f}x vs ar)"
    return TuneResult(method=method, table=table, k=k, reason=reason, stopped=True)


def tune_on_device(
    target: LoadedModel,
    method: str,
    config: DecodeConfig,
    specs: dict[str, str],
    prompts: Sequence[str] = TUNING_PROMPTS,
    candidates: Sequence[int] = CANDIDATES,
    progress: Callable[[SweepProgress], None] | None = None,
    extra: Extra = None,
    stop: StopFlag | None = None,
) -> TuneResult:
    """`autotune_k` with the real models: short runs (`TUNING_MAX_NEW_TOKENS`) on `prompts`.
    `extra` is the method's draft / head if already loaded (the GUI's Tune), else from `specs`;
    `stop` ends it after the point being measured."""
    check_tunable(method)
    short = replace(config, max_new_tokens=min(config.max_new_tokens, TUNING_MAX_NEW_TOKENS))
    extras = {method: extra} if extra is not None else None
    measure = BenchMeasure(target, prompts, specs, raw=False, extras=extras)
    return autotune_k(method, short, measure, candidates, progress, stop)


def check_tunable(method: str) -> None:
    if method == "ar":
        raise SpecdecError("--k auto needs a speculative method; 'ar' drafts nothing")
    if is_tree(method):  # a tree has no chain length k to tune
        raise SpecdecError(
            f"--k auto tunes chain drafters; '{method}' drafts a tree: "
            f"use `specdec sweep --method {method} --tree-tokens ... --tree-depth ...`"
        )


def _row(record: dict[str, Any]) -> TuneRow:
    """A sweep point's record (`sweep._record`) as a row of the tuning table."""
    return TuneRow(
        k=record["point"]["k"],
        tokens_per_second=record["tokens_per_second"],
        speedup_vs_ar=record["speedup_vs_ar"],
        mean_accept_length=record["mean_accept_length"],
        ar_tokens_per_second=record["ar_tokens_per_second"],
    )
