"""Auto-tune the draft length k: a short sweep on this device, then the argmax of its table.

`--k auto` (generate / bench) and the GUI's "Tune" action call `autotune_k`. It measures each
candidate k on a few short prompts with the current models, temperature and policy — a sweep
(`specdec_core.tuning.sweep`) over k alone, speedup as a ratio to `ar` measured in the same run —
and returns the whole table, the chosen k and a sentence saying why. The choice is the row with the
highest speedup; a tie (within 1%, well inside timing noise) goes to the smaller k, which drafts
less and wastes less when acceptance drops.

Only chain drafters have a k: for a tree method (EAGLE-2 and its merges) the window's Tune
tunes the tree's size in tokens the same way (`TREE_CANDIDATES`, depth and top-k sized for each
on this device); `--k auto` stays for chains. The candidates and the choice are torch-free
(tune.py), so the window's Tune of a method's own parameter (layer-skip's exit layer, SWIFT's
skip ratio, lookahead's W and N) measures the sweep's `method_params.NAME` axis through its
engine's sweep and picks with the same rule.

A stop flag (the GUI's Stop) ends the tuning within one decode step: it reaches the runs of
the point being measured (sweep.py), which is dropped; the result then holds the rows measured
before it, `stopped` set, its reason names the value Stop cut short, and it keeps the k it was
given (a partial table picks no k).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from specdec_core.control import StopFlag
from specdec_core.decoding.config import DecodeConfig
from specdec_core.errors import SpecdecError
from specdec_core.measurement.sweep_records import TuneResult
from specdec_core.models.loading import LoadedModel
from specdec_core.run.methods import Extra, is_tree
from specdec_core.tuning.sweep import BenchMeasure, Measure, SweepProgress, run_sweep
from specdec_core.tuning.tune import (  # noqa: F401 (the candidates and the choice, also named here)
    CANDIDATES,
    TIE,
    TREE_CANDIDATES,
    TUNING_MAX_NEW_TOKENS,
    TUNING_PROMPTS,
    TuneRow,
    choose_k,
    tune_grid,
    tune_result,
)


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
    grid = tune_grid(setting == "tree_tokens", candidates)
    result = run_sweep(method, grid, config, measure, progress=progress, stop=stop)
    given = config.tree_tokens if setting == "tree_tokens" else config.k
    return tune_result(method, setting, grid, result.points, given)


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
