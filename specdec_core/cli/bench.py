"""`specdec bench`: methods (and policies) compared on a prompt file in one run."""

from __future__ import annotations

import argparse
import sys

from specdec_core.cli.options import (
    add_decode_options,
    add_model_options,
    check_policy,
    decode_config,
    load_options,
    load_progress,
    model_specs,
    resolve_auto_k,
)
from specdec_core.errors import SpecdecError


def register(sub: argparse._SubParsersAction) -> None:
    from specdec_core.baselines import HF_METHODS
    from specdec_core.methods import METHODS

    parser = sub.add_parser("bench", help="compare methods on a prompt file in one run")
    parser.add_argument(
        "--methods",
        default="ar,classic",
        help=f"comma-separated: {','.join([*METHODS, *HF_METHODS])}; an entry "
        "METHOD:POLICY[:NAME=VALUE[/NAME=VALUE...]] runs METHOD with that policy, so several "
        "policies compare in one run, e.g. ar,ngram,ngram:threshold:tau=0.3,ngram:typical. "
        "The table adds fidelity to ar: prefix (share of tokens before the first difference), "
        "tokens (position-wise agreement), logp (mean target log-prob per token)",
    )
    parser.add_argument("--prompts", required=True, help="JSONL with 'prompt' or 'turns'")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--json-out", default=None)
    parser.add_argument("--csv-out", default=None)
    parser.add_argument(
        "--reference",
        default="same",
        choices=["same", "fp32"],
        help="fp32: also run ar once per prompt with the target in float32 (not timed), report "
        "identical_to_fp32 and measure every first difference in float32: checks a bf16 / "
        "fp16 run against exact arithmetic",
    )
    add_model_options(parser)
    add_decode_options(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from specdec_core.baselines import HF_METHODS
    from specdec_core.bench import (
        format_table,
        parse_variant,
        run_bench,
        stderr_progress,
        write_outputs,
    )
    from specdec_core.methods import METHODS
    from specdec_core.models import load_model
    from specdec_core.prompts import read_prompt_file

    config = decode_config(args)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m.partition(":")[0] not in (*METHODS, *HF_METHODS)]
    if unknown:
        known = ", ".join([*METHODS, *HF_METHODS])
        raise SpecdecError(f"unknown method(s) {', '.join(unknown)}; choose from: {known}")
    for _, variant in (parse_variant(m, config) for m in methods):
        check_policy(variant)
    prompts = read_prompt_file(args.prompts, args.limit)
    options = load_options(args, prompts)
    target = load_model(args.target, args.device, args.dtype, load_progress(), options=options)
    config = resolve_auto_k(args, config, target, methods)
    exact = None
    if args.reference == "fp32" and target.dtype_name != "float32":
        exact = load_model(
            args.target, str(target.device), "float32", load_progress(), options=options
        )
    result = run_bench(
        target,
        methods,
        prompts,
        config,
        model_specs(args),
        args.raw,
        progress=stderr_progress,
        reference_model=exact,
    )
    print(file=sys.stderr)
    print(format_table(result))
    write_outputs(result, args.json_out, args.csv_out)
    return 0
