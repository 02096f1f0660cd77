"""`specdec sweep`: speedup and τ of one method over a grid of settings (JSON, PNG)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specdec_core.cli.options import (
    add_decode_options,
    add_model_options,
    decode_config,
    load_options,
    model_specs,
    progress_line,
    show,
    sweep_axes,
)
from specdec_core.errors import SpecdecError
from specdec_core.measurement.sweep_records import BASELINES, SweepResult, read_sweep


def register(sub: argparse._SubParsersAction) -> None:
    from specdec_core.run.method_kinds import METHOD_NAMES

    parser = sub.add_parser(
        "sweep", help="speedup and tau of one method over a grid of settings (JSON, PNG)"
    )
    parser.add_argument("--method", required=True, choices=list(METHOD_NAMES))
    parser.add_argument("--prompts", required=True, help="JSONL with 'prompt' or 'turns'")
    parser.add_argument("--limit", type=int, default=None)
    add_model_options(parser)
    add_decode_options(parser, sweep=True)
    parser.add_argument(
        "--policy-param-grid",
        action="append",
        default=[],
        metavar="NAME=V1,V2,...",
        help="sweep a policy parameter, e.g. tau=0.1,0.3,0.5 (repeatable; with --policy)",
    )
    parser.add_argument(
        "--method-param-grid",
        action="append",
        default=[],
        metavar="NAME=V1,V2,...",
        help="sweep a method parameter, e.g. window=2,3,5 (repeatable; `specdec methods` "
        "lists each method's)",
    )
    parser.add_argument("--json-out", default=None, help="results, rewritten after every point")
    parser.add_argument("--png-out", default=None, help="heatmap / curve of speedup")
    parser.add_argument("--resume", action="store_true", help="skip points already in --json-out")
    parser.add_argument(
        "--baseline",
        default="temperature",
        choices=list(BASELINES),
        help="measure ar once per temperature (default) or again before every point",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from specdec_core.cli.options import check_policy
    from specdec_core.environment import command_line, current_environment
    from specdec_core.models.loading import load_model
    from specdec_core.run.methods import check_method_params
    from specdec_core.run.prompts import read_prompt_file
    from specdec_core.tuning.sweep import BenchMeasure, Grid, apply_point, run_sweep

    axes = sweep_axes(args)
    if not axes:
        raise SpecdecError("nothing to sweep; pass e.g. --k 1,2,4,8 and/or --temperature 0,0.7,1")
    base, grid = decode_config(args, sweep=True), Grid(axes)
    check_policy(apply_point(base, grid.points()[0]))  # fail before any model loads
    check_method_params([args.method], apply_point(base, grid.points()[0]).method_params)
    json_out = Path(args.json_out) if args.json_out else None
    if json_out is None:
        print("note: without --json-out an interrupted sweep cannot resume", file=sys.stderr)
    prompts = read_prompt_file(args.prompts, args.limit)
    options = load_options(args, prompts)
    target = load_model(args.target, args.device, args.dtype, options=options)
    header = {
        "target": target.spec,
        "device": str(target.device),
        "dtype": target.dtype_name,
        "prompts_file": str(args.prompts),
        "prompts": len(prompts),
        "specs": model_specs(args),
        "raw": args.raw,
        "baseline": args.baseline,
        "environment": current_environment(
            target.device, args.invocation or command_line()
        ).to_record(),
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
            progress_line,
            baseline=args.baseline,
        )
    except KeyboardInterrupt:
        saved = f"the finished points are in {json_out}" if json_out else "nothing was saved"
        print(f"\nsweep interrupted: {saved}; rerun with --resume to continue", file=sys.stderr)
        _png(args.png_out, json_out)
        return 130
    print(file=sys.stderr)
    print(format_sweep(result))
    _png(args.png_out, json_out, result)
    return 0


def format_sweep(result: SweepResult) -> str:
    """The measured points as a table (fidelity columns for lossy ones), then the best point
    per temperature."""
    names = list(result.header["axes"])
    lossy = any(p.aggregate.lossy for p in result.points)
    tree = any(p.aggregate.tree for p in result.points)  # tokens/depth/top-k a tree method used
    header = "".join(f"{n.split('params.')[-1]:>12}" for n in names)
    header += f"{'tok/s':>8}{'ar tok/s':>9}{'speedup':>9}{'tau':>7}"
    header += f"{'prefix':>8}{'logp':>8}" if lossy else ""
    header += f"{'tree used':>12}" if tree else ""
    lines = [header, "-" * len(header)]
    for p in result.points:
        cells = "".join(f"{show(p.point[n]):>12}" for n in names)
        cells += f"{p.aggregate.tokens_per_second:>8.1f}{p.ar_tokens_per_second:>9.1f}"
        cells += f"{p.speedup_vs_ar:>8.2f}x{p.mean_accept_length:>7.2f}"
        if lossy:
            cells += _number(p.aggregate.prefix_agreement, 8) + _number(p.aggregate.mean_logprob, 8)
        cells += f"{p.aggregate.tree or '-':>12}" if tree else ""
        lines.append(cells)
    for temperature, best in result.best_by_temperature().items():
        point = ", ".join(f"{k}={show(v)}" for k, v in best.point.items())
        lines.append(
            f"best at T={temperature}: {point} -> {best.speedup_vs_ar:.2f}x, "
            f"tau {best.mean_accept_length:.2f}"
        )
    return "\n".join(lines)


def _number(value: float | None, width: int) -> str:
    return f"{value:>{width}.3f}" if value is not None else f"{'-':>{width}}"


def _png(png_out: str | None, json_out: Path | None, result: SweepResult | None = None) -> None:
    if not png_out:
        return
    from specdec_core.tuning.sweep_plot import render_png

    if result is None:
        if json_out is None or not json_out.is_file():
            return
        result = read_sweep(json_out)
    if result.points:
        render_png(result, png_out)
        print(f"wrote {png_out}", file=sys.stderr)
