"""`specdec export`: the vLLM `--speculative-config` JSON or the SGLang flags for a setting;
with `--serve`, the whole server command line (`specdec_core.serving.serve`); with `--head-out DIR`,
what the method drafts with (an EAGLE head, Medusa heads, an MLP speculator) written as the
engine loads it (`specdec_core.serving.head_export`), which the command then names. A
method an engine cannot serve (lookahead, layer skipping, Medusa for SGLang, ...) is one line
saying why."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from typing import TYPE_CHECKING

from specdec_core.cli.options import (
    AUTO,
    add_decode_options,
    add_model_options,
    decode_config,
    model_specs,
)
from specdec_core.errors import SpecdecError

if TYPE_CHECKING:
    from specdec_core.serving.head_export import HeadExport


def register(sub: argparse._SubParsersAction) -> None:
    from specdec_core.serving.export import ENGINES, SERVING

    parser = sub.add_parser(
        "export",
        help="print the vLLM --speculative-config JSON or the SGLang flags for a setting",
    )
    parser.add_argument("--engine", required=True, choices=list(ENGINES))
    parser.add_argument("--method", default="eagle", choices=list(SERVING))
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--from-sweep",
        default=None,
        metavar="FILE",
        help="export the fastest point of a `specdec sweep` JSON (method, models, settings)",
    )
    parser.add_argument(
        "--at-temperature", type=float, default=None, help="with --from-sweep: best at this T"
    )
    parser.add_argument(
        "--serve",
        action="store_true",
        help="print the whole server command (vllm serve … / python -m sglang.launch_server …) "
        "with the model, the speculative settings and --dtype",
    )
    parser.add_argument(
        "--head-out",
        default=None,
        metavar="DIR",
        help="eagle / eagle2: write the head into DIR as the engine loads it as it stands (for "
        "SGLang with the --speculative-token-map file of a reduced vocabulary); medusa / "
        "mlp-speculator: write the heads or the speculator in vLLM's layout; the printed "
        "command then serves DIR; what the engine cannot carry is refused, saying why",
    )
    parser.add_argument(
        "--tensor-parallel-size",
        type=int,
        default=1,
        metavar="N",
        help="with --serve: GPUs to shard the target over (vLLM --tensor-parallel-size, "
        "SGLang --tp); left out at 1",
    )
    add_model_options(parser)
    add_decode_options(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from specdec_core.serving.export import SERVING, best_of_sweep, export

    if args.from_sweep:
        best = best_of_sweep(args.from_sweep, args.at_temperature)
        setting = (best.method, best.config, best.target, best.model)
        note = best.note
    else:
        if args.k == AUTO:
            raise SpecdecError(
                "export needs a number for --k; run `specdec generate --k auto …` to measure "
                "one, or export a sweep's best point with --from-sweep FILE"
            )
        config = decode_config(args)
        needs = SERVING[args.method].needs
        model = model_specs(args)[needs] if needs else ""
        setting, note = (args.method, config, args.target, model), None
    head = _export_head(args, setting) if args.head_out else None
    if head is not None:
        setting = (*setting[:3], str(head.directory))
    if args.serve:
        return _serve(args, setting, note, head)
    result = export(args.engine, *setting)
    if note:
        result.notes.insert(0, note)
    if args.json:
        print(json.dumps(_with_head(asdict(result), head)))
        return 0
    print(result.payload)
    for line in _head_lines(head) + result.notes:
        print(f"# {line}", file=sys.stderr)
    print(f"# example: {result.command}", file=sys.stderr)
    return 0


def _serve(
    args: argparse.Namespace, setting: tuple, note: str | None, head: HeadExport | None
) -> int:
    from specdec_core.serving.serve import serve_command

    command = serve_command(
        args.engine, *setting, dtype=args.dtype, tensor_parallel_size=args.tensor_parallel_size
    )
    if note:
        command.notes.insert(0, note)
    if args.json:
        print(json.dumps(_with_head(command.to_record(), head)))
        return 0
    print(command.command)
    for line in _head_lines(head) + command.notes:
        print(f"# {line}", file=sys.stderr)
    return 0


def _export_head(args: argparse.Namespace, setting: tuple) -> HeadExport:
    from specdec_core.serving.head_export import export_for_method

    method, config, _, model = setting
    return export_for_method(args.engine, method, model or "embedded", args.head_out, config)


def _with_head(record: dict, head: HeadExport | None) -> dict:
    """The JSON record, with the written head under "head" when --head-out wrote one."""
    return {**record, "head": head.to_record()} if head is not None else record


def _head_lines(head: HeadExport | None) -> list[str]:
    if head is None:
        return []
    return [f"wrote {', '.join(head.files)} to {head.directory}", *head.notes]
