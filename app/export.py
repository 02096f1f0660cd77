"""Comparison results as rows, and their CSV / JSON export (no Qt)."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

from specdec_core.events import RunSummary

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
)


@dataclass(frozen=True)
class CompareResult:
    method: str
    label: str
    color: str
    summary: RunSummary


def result_rows(results: list[CompareResult]) -> list[dict]:
    """One row per method; speedup and identity are relative to the `ar` run, if any."""
    ar = next((r.summary for r in results if r.method == "ar"), None)
    rows = []
    for result in results:
        s = result.summary
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
                "identical_to_ar": None if ar is None else s.token_ids == ar.token_ids,
                "stop_reason": s.stop_reason,
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
