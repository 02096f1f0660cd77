"""Comparison results as rows, and their CSV / JSON export (no Qt).

Each method's speedup is its tokens/s over the `ar` run of the same Compare, with the 95 %
interval of that ratio over both runs' steps (`speedup_interval_low`, `speedup_interval_high`:
`specdec_core/measurement/run_speedup.py`; empty for `ar` itself and where no step was timed). Files
written before the interval lack those two keys; every other key is as before.

A run Stop cut short (`stop_reason` "stopped", a Compare stopped midway) is a partial row: its
tokens/s and speedup are of the part it ran, and it has no whole answer to be identical to
`ar`'s, so `identical_to_ar` is empty for it, and for every row when `ar` itself was stopped."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

from app.reference import measured
from specdec_core.decoding.events import RunSummary
from specdec_core.measurement.run_speedup import StepTime

COLUMNS = (
    "method",
    "label",
    "policy",
    "lossy",
    "new_tokens",
    "steps",
    "mean_accept_length",
    "tokens_per_second",
    "speedup_vs_ar",
    "identical_to_ar",
    "stop_reason",
    "speedup_interval_low",
    "speedup_interval_high",
)


@dataclass(frozen=True)
class CompareResult:
    method: str
    label: str
    color: str
    summary: RunSummary
    steps: tuple[StepTime, ...] = ()  # each step's tokens and seconds, for the interval


def stopped(summary: RunSummary) -> bool:
    """Did Stop cut this run short (a partial run)?"""
    return summary.stop_reason == "stopped"


def result_rows(results: list[CompareResult]) -> list[dict]:
    """One row per method; speedup (with its interval over both runs' steps) and identity are
    relative to the `ar` run, if any; identity only between whole runs."""
    reference = next((r for r in results if r.method == "ar"), None)
    ar = reference.summary if reference is not None else None
    rows = []
    for result in results:
        s = result.summary
        found = None
        if reference is not None and result is not reference:
            found = measured(s, reference.summary, result.steps, reference.steps)
        low, high = found.interval if found is not None and found.interval else (None, None)
        rows.append(
            {
                "method": result.method,
                "label": result.label,
                "policy": s.policy,
                "lossy": s.lossy,
                "new_tokens": s.new_tokens,
                "steps": s.steps,
                "mean_accept_length": round(s.mean_accept_length, 3),
                "tokens_per_second": round(s.tokens_per_second, 2),
                "speedup_vs_ar": (
                    round(s.tokens_per_second / ar.tokens_per_second, 3)
                    if ar is not None and ar.tokens_per_second > 0
                    else None
                ),
                "identical_to_ar": (
                    None if ar is None or stopped(s) or stopped(ar) else s.token_ids == ar.token_ids
                ),
                "stop_reason": s.stop_reason,
                "speedup_interval_low": None if low is None else round(low, 3),
                "speedup_interval_high": None if high is None else round(high, 3),
            }
        )
    return rows


def write_csv(results: list[CompareResult], path: Path) -> None:
    with Path(path).open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(result_rows(results))


def write_json(results: list[CompareResult], path: Path, prompt: str = "") -> None:
    payload = {
        "prompt": prompt,
        "config": results[0].summary.config if results else {},
        "methods": result_rows(results),
        "texts": {r.method: r.summary.text for r in results},
    }
    Path(path).write_text(json.dumps(payload, indent=2, default=str), encoding="utf-8")
