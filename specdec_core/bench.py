"""`specdec bench`: every method on the same prompts in one process, speed as a ratio to `ar`.

Methods are interleaved per prompt (prompt 1: ar, eagle, …; prompt 2: …) so that drift of a
noisy machine hits all of them alike. `ar` always runs: it is the reference for speedup and
for `identical_to_ar`.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from specdec_core.baselines import HF_METHODS, run_hf
from specdec_core.config import DecodeConfig
from specdec_core.models import LoadedModel
from specdec_core.prompts import encode_prompt
from specdec_core.runner import prepare_extra, run

Progress = Callable[[str], None]


@dataclass
class BenchResult:
    config: dict
    methods: dict[str, dict] = field(default_factory=dict)
    per_prompt: list[dict] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"config": self.config, "methods": self.methods, "per_prompt": self.per_prompt}


def run_bench(
    target: LoadedModel,
    methods: list[str],
    prompts: list[str],
    config: DecodeConfig,
    specs: dict[str, str],
    raw: bool = False,
    progress: Progress | None = None,
) -> BenchResult:
    report = progress or (lambda message: None)
    methods = ["ar", *[m for m in methods if m != "ar"]]
    extras = {m: _extra(m, target, specs) for m in methods}
    encoded = [encode_prompt(target.tokenizer, prompt, raw) for prompt in prompts]
    _warm_up(target, encoded[0], config)
    rows: list[dict] = []
    for index, ids in enumerate(encoded):
        reference: list[int] | None = None
        for method in methods:
            report(f"prompt {index + 1}/{len(encoded)}: {method}")
            row = _run_one(method, target, ids, config, extras[method])
            reference = row["token_ids"] if method == "ar" else reference
            row.update(prompt_index=index, identical_to_ar=row["token_ids"] == reference)
            rows.append(row)
    result = BenchResult(config={**config.as_dict(), **_describe(target, methods, specs)})
    result.per_prompt = [{k: v for k, v in row.items() if k != "token_ids"} for row in rows]
    ar_tps = _aggregate([r for r in rows if r["method"] == "ar"])["tokens_per_second"]
    for method in methods:
        summary = _aggregate([r for r in rows if r["method"] == method])
        summary["speedup_vs_ar"] = summary["tokens_per_second"] / ar_tps if ar_tps else 0.0
        result.methods[method] = summary
    return result


def _extra(method: str, target: LoadedModel, specs: dict[str, str]) -> object | None:
    if method in HF_METHODS:
        return prepare_extra("classic", target, specs) if method == "hf-assisted" else None
    return prepare_extra(method, target, specs)


def _run_one(method: str, target: LoadedModel, ids: list[int], config, extra) -> dict:
    if method in HF_METHODS:
        return run_hf(method, target, ids, config, extra)
    summary = run(target, method, ids, config, extra)
    return {
        "method": method,
        "token_ids": list(summary.token_ids),
        "new_tokens": summary.new_tokens,
        "steps": summary.steps,
        "mean_accept_length": summary.mean_accept_length,
        "wall_seconds": summary.wall_seconds,
        "tokens_per_second": summary.tokens_per_second,
        "draft_seconds": summary.draft_seconds,
        "verify_seconds": summary.verify_seconds,
        "lossy": summary.lossy,
    }


def _aggregate(rows: list[dict]) -> dict:
    new = sum(r["new_tokens"] for r in rows)
    wall = sum(r["wall_seconds"] for r in rows)
    steps = sum(r["steps"] for r in rows)
    draft = [r["draft_seconds"] for r in rows if r["draft_seconds"] is not None]
    verify = [r["verify_seconds"] for r in rows if r["verify_seconds"] is not None]
    return {
        "tokens_per_second": new / wall if wall else 0.0,
        "mean_accept_length": new / steps if steps else 0.0,
        "identical_to_ar": sum(r["identical_to_ar"] for r in rows) / len(rows),
        "prompts": len(rows),
        "new_tokens": new,
        "steps": steps,
        "wall_seconds": wall,
        "draft_ms_per_step": 1000 * sum(draft) / steps if draft and steps else None,
        "verify_ms_per_step": 1000 * sum(verify) / steps if verify and steps else None,
        "lossy": any(r.get("lossy", False) for r in rows),
    }


def _warm_up(target: LoadedModel, ids: list[int], config: DecodeConfig) -> None:
    """One short run so that first-call allocation does not land on the first method."""
    run(target, "ar", ids, DecodeConfig(max_new_tokens=4, seed=config.seed))


def _describe(target: LoadedModel, methods: list[str], specs: dict[str, str]) -> dict:
    return {
        "target": target.spec,
        "device": str(target.device),
        "dtype": str(target.dtype).removeprefix("torch."),
        "methods": methods,
        **{f"{name}_spec": spec for name, spec in specs.items()},
    }


def format_table(result: BenchResult) -> str:
    header = f"{'method':<14}{'tok/s':>8}{'speedup':>9}{'tau':>7}{'draft ms':>10}"
    header += f"{'verify ms':>11}{'ident.':>8}  note"
    lines = [header, "-" * len(header)]
    for name, m in result.methods.items():
        draft = f"{m['draft_ms_per_step']:.1f}" if m["draft_ms_per_step"] is not None else "-"
        verify = f"{m['verify_ms_per_step']:.1f}" if m["verify_ms_per_step"] is not None else "-"
        lines.append(
            f"{name:<14}{m['tokens_per_second']:>8.1f}{m['speedup_vs_ar']:>8.2f}x"
            f"{m['mean_accept_length']:>7.2f}{draft:>10}{verify:>11}"
            f"{m['identical_to_ar']:>8.2f}  {'LOSSY' if m['lossy'] else ''}"
        )
    return "\n".join(lines)


def write_outputs(result: BenchResult, json_out: str | None, csv_out: str | None) -> None:
    if json_out:
        Path(json_out).write_text(json.dumps(result.as_dict(), indent=2))
    if csv_out:
        with open(csv_out, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(result.per_prompt[0]))
            writer.writeheader()
            writer.writerows(result.per_prompt)


def stderr_progress(message: str) -> None:
    print(f"\r\033[K{message}", end="", file=sys.stderr, flush=True)
