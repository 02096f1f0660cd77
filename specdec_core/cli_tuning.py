"""CLI plumbing for tuning and deployment: `specdec sweep`, `specdec export` and `--k auto`.

Kept out of `cli.py` so that the shared CLI module only registers these (`add_parsers`) and
calls `resolve_auto_k`; the algorithms live in `sweep`, `autotune` and `export`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from specdec_core.cli import (
    AUTO,
    add_decode_options,
    add_model_options,
    check_policy,
    decode_config,
    model_specs,
)
from specdec_core.config import DecodeConfig
from specdec_core.drafters.adaptive import SCHEDULES
from specdec_core.errors import SpecdecError

GRID_AXES = {  # option dest -> (sweep axis, cast, smallest value, 'auto' allowed)
    "k": ("k", int, 0, False),
    "temperature": ("temperature", float, 0.0, False),
    "tree_tokens": ("tree_tokens", int, 2, True),
    "tree_depth": ("tree_depth", int, 1, True),
    "tree_topk": ("tree_topk", int, 1, True),
    "k_schedule": ("k_schedule", str, None, False),
}


def add_parsers(sub) -> dict[str, Callable[[argparse.Namespace], int]]:
    """Add `sweep` and `export` to the `specdec` subparsers; returns their handlers."""
    from specdec_core.export import ENGINES, METHOD_MAP
    from specdec_core.methods import METHODS

    sweep = sub.add_parser(
        "sweep",
        conflict_handler="resolve",  # the grid axes below replace the single-value options
        help="speedup and tau of one method over a grid of settings (JSON, PNG)",
    )
    sweep.add_argument("--method", required=True, choices=list(METHODS))
    sweep.add_argument("--prompts", required=True, help="JSONL with 'prompt' or 'turns'")
    sweep.add_argument("--limit", type=int, default=None)
    add_model_options(sweep)
    add_decode_options(sweep)
    for dest, (_, cast, _, auto) in GRID_AXES.items():
        flag = "--" + dest.replace("_", "-")
        kind = {int: "integers", float: "numbers", str: "names"}[cast]
        extra = " ('auto' = sized for the device)" if auto else ""
        sweep.add_argument(flag, dest=dest, default=None, help=f"comma-separated {kind}{extra}")
    sweep.add_argument(
        "--policy-param-grid",
        action="append",
        default=[],
        metavar="NAME=V1,V2,...",
        help="sweep a policy parameter, e.g. tau=0.1,0.3,0.5 (repeatable; with --policy)",
    )
    sweep.add_argument("--json-out", default=None, help="results, rewritten after every point")
    sweep.add_argument("--png-out", default=None, help="heatmap / curve of speedup")
    sweep.add_argument("--resume", action="store_true", help="skip points already in --json-out")
    sweep.add_argument(
        "--baseline",
        default="temperature",
        choices=["temperature", "point"],
        help="measure ar once per temperature (default) or again before every point",
    )

    export = sub.add_parser(
        "export",
        help="print the vLLM --speculative-config JSON or the SGLang flags for a setting",
    )
    export.add_argument("--engine", required=True, choices=list(ENGINES))
    export.add_argument("--method", default="eagle", choices=list(METHOD_MAP))
    export.add_argument("--json", action="store_true", help="print one JSON object")
    export.add_argument(
        "--from-sweep",
        default=None,
        metavar="FILE",
        help="export the fastest point of a `specdec sweep` JSON (method, models, settings)",
    )
    export.add_argument(
        "--at-temperature", type=float, default=None, help="with --from-sweep: best at this T"
    )
    add_model_options(export)
    add_decode_options(export)
    return {"sweep": cmd_sweep, "export": cmd_export}


def resolve_auto_k(
    args, config: DecodeConfig, target, methods: list[str], extra: object | None = None
) -> DecodeConfig:
    """With `--k auto`, tune k for the first speculative chain method (with its draft / head
    `extra` if already loaded), print the table on stderr and return `config` with the chosen
    k; otherwise return `config` unchanged."""
    if getattr(args, "k", None) != AUTO:
        return config
    from specdec_core.autotune import tune_on_device
    from specdec_core.baselines import HF_METHODS
    from specdec_core.methods import is_tree

    names = [m.partition(":")[0] for m in methods]
    chain = [m for m in names if m != "ar" and m not in HF_METHODS and not is_tree(m)]
    if not chain:
        raise SpecdecError("--k auto needs a speculative chain method (classic, eagle, ngram)")
    print(f"--k auto: tuning k for '{chain[0]}' on this device…", file=sys.stderr)
    tuned = tune_on_device(
        target, chain[0], config, model_specs(args), progress=_progress_line, extra=extra
    )
    print(f"\n{tuned.format_table()}\nchosen {tuned.reason}", file=sys.stderr)
    if len(set(chain)) > 1:
        print(f"(the same k is used for {', '.join(dict.fromkeys(chain))})", file=sys.stderr)
    return replace(config, k=tuned.k)


def cmd_sweep(args: argparse.Namespace) -> int:
    from specdec_core.models import load_model
    from specdec_core.prompts import read_prompt_file
    from specdec_core.sweep import BenchMeasure, Grid, apply_point, run_sweep

    axes = _axes(args)
    if not axes:
        raise SpecdecError("nothing to sweep; pass e.g. --k 1,2,4,8 and/or --temperature 0,0.7,1")
    base, grid = _base_config(args), Grid(axes)
    first = apply_point(base, grid.points()[0])
    check_policy(first.policy, first.policy_params)  # fail before any model loads
    json_out = Path(args.json_out) if args.json_out else None
    if json_out is None:
        print("note: without --json-out an interrupted sweep cannot resume", file=sys.stderr)
    prompts = read_prompt_file(args.prompts, args.limit)
    target = load_model(args.target, args.device, args.dtype)
    header = {
        "target": target.spec,
        "device": str(target.device),
        "dtype": str(target.dtype).removeprefix("torch."),
        "prompts_file": str(args.prompts),
        "prompts": len(prompts),
        "specs": model_specs(args),
        "raw": args.raw,
        "baseline": args.baseline,
    }
    measure = BenchMeasure(target, prompts, model_specs(args), args.raw)
    try:
        result = run_sweep(
            args.method,
            grid,
            base,
            measure,
            header,
            json_out,
            args.resume,
            _progress_line,
            baseline=args.baseline,
        )
    except KeyboardInterrupt:
        saved = f"the finished points are in {json_out}" if json_out else "nothing was saved"
        print(f"\nsweep interrupted: {saved}; rerun with --resume to continue", file=sys.stderr)
        _png(args, json_out)
        return 130
    print(file=sys.stderr)
    print(format_sweep(result.as_dict()))
    _png(args, json_out, result.as_dict())
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from specdec_core.export import METHOD_MAP, best_of_sweep, export

    if args.from_sweep:
        best = best_of_sweep(args.from_sweep, args.at_temperature)
        result = export(args.engine, best.method, best.config, best.target, best.model)
        result.notes.insert(0, best.note)
    else:
        if args.k == AUTO:
            raise SpecdecError(
                "export needs a number for --k; run `specdec generate --k auto …` to measure "
                "one, or export a sweep's best point with --from-sweep FILE"
            )
        config = decode_config(args)
        model = args.head if METHOD_MAP[args.method][0] == "head" else args.draft
        result = export(args.engine, args.method, config, args.target, model)
    if args.json:
        print(json.dumps(result.__dict__))
        return 0
    print(result.payload)
    for note in result.notes:
        print(f"# {note}", file=sys.stderr)
    print(f"# example: {result.command}", file=sys.stderr)
    return 0


def format_sweep(result: dict[str, Any]) -> str:
    """The measured points as a table (fidelity columns for lossy ones), then the best point
    per temperature."""
    names = list(result["sweep"]["axes"])
    lossy = any(p.get("lossy") for p in result["points"])
    tree = any(p.get("tree") for p in result["points"])  # tokens/depth/top-k a tree method used
    header = "".join(f"{n.removeprefix('policy_params.'):>12}" for n in names)
    header += f"{'tok/s':>8}{'ar tok/s':>9}{'speedup':>9}{'tau':>7}"
    header += f"{'prefix':>8}{'logp':>8}" if lossy else ""
    header += f"{'tree used':>12}" if tree else ""
    lines = [header, "-" * len(header)]
    for p in result["points"]:
        cells = "".join(f"{_show(p['point'][n]):>12}" for n in names)
        cells += f"{p['tokens_per_second']:>8.1f}{p['ar_tokens_per_second']:>9.1f}"
        cells += f"{p['speedup_vs_ar']:>8.2f}x{p['mean_accept_length']:>7.2f}"
        if lossy:
            cells += "".join(_number(p.get(key), 8) for key in ("prefix_agreement", "mean_logprob"))
        cells += f"{p.get('tree') or '-':>12}" if tree else ""
        lines.append(cells)
    for temperature, best in result["best_by_temperature"].items():
        point = ", ".join(f"{k}={_show(v)}" for k, v in best["point"].items())
        lines.append(
            f"best at T={temperature}: {point} -> {best['speedup_vs_ar']:.2f}x, "
            f"tau {best['mean_accept_length']:.2f}"
        )
    return "\n".join(lines)


def _number(value: float | None, width: int) -> str:
    return f"{value:>{width}.3f}" if value is not None else f"{'-':>{width}}"


def _axes(args: argparse.Namespace) -> dict[str, list[Any]]:
    axes: dict[str, list[Any]] = {}
    for dest, (axis, cast, low, auto) in GRID_AXES.items():
        text = getattr(args, dest)
        if text is not None:
            axes[axis] = [_grid_value(v, cast, low, auto, dest) for v in text.split(",")]
    for item in args.policy_param_grid:
        name, _, values = item.partition("=")
        if not name.strip() or not values:
            raise SpecdecError(f"--policy-param-grid expects NAME=V1,V2,... (got '{item}')")
        axes[f"policy_params.{name.strip()}"] = [
            _grid_value(v, float, None, False, "policy_param_grid") for v in values.split(",")
        ]
    unknown = set(axes.get("k_schedule", [])) - set(SCHEDULES)
    if unknown:
        raise SpecdecError(f"--k-schedule: unknown {sorted(unknown)}; use {', '.join(SCHEDULES)}")
    return axes


def _grid_value(text: str, cast, low, auto: bool, name: str):
    text = text.strip()
    if auto and text == AUTO:
        return None
    try:
        value = cast(text)
    except ValueError:
        raise SpecdecError(f"--{name.replace('_', '-')}: '{text}' is not a number") from None
    if low is not None and value < low:
        raise SpecdecError(f"--{name.replace('_', '-')}: values must be >= {low} (got {value})")
    return value


def _base_config(args: argparse.Namespace) -> DecodeConfig:
    """The fixed settings. Every grid option given is an axis (maybe of one value), so the
    grid fields here are only placeholders that each point overrides."""
    fixed = argparse.Namespace(**vars(args))
    fixed.k, fixed.temperature = DecodeConfig.k, DecodeConfig.temperature
    fixed.tree_tokens, fixed.tree_depth, fixed.tree_topk = AUTO, None, None
    fixed.k_schedule = DecodeConfig.k_schedule
    return decode_config(fixed)


def _show(value: Any) -> str:
    return AUTO if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def _progress_line(progress) -> None:
    width = 20
    filled = round(width * progress.done / progress.total)
    point = " ".join(
        f"{k.removeprefix('policy_params.')}={_show(v)}" for k, v in progress.point.items()
    )
    eta = f"{progress.eta_seconds / 60:.1f} min left" if progress.eta_seconds is not None else ""
    record = progress.record
    print(
        f"[{'#' * filled}{'.' * (width - filled)}] {progress.done}/{progress.total} {point}: "
        f"{record['speedup_vs_ar']:.2f}x, tau {record['mean_accept_length']:.2f} | {eta}",
        file=sys.stderr,
        flush=True,
    )


def _png(args: argparse.Namespace, json_out: Path | None, result: dict | None = None) -> None:
    if not args.png_out:
        return
    from specdec_core.sweep_plot import render_png

    if result is None:
        if json_out is None or not json_out.is_file():
            return
        result = json.loads(json_out.read_text())
    if result["points"]:
        render_png(result, args.png_out)
        print(f"wrote {args.png_out}", file=sys.stderr)
