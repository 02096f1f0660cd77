"""`specdec bench`: methods (and policies) compared on a prompt file in one run."""

from __future__ import annotations

import argparse
import sys

from specdec_core.cli.options import (
    adapt_settings,
    add_adapt_options,
    add_decode_options,
    add_model_options,
    add_policy_profile_option,
    check_policy,
    decode_config,
    load_options,
    load_progress,
    model_specs,
    policy_profile,
    resolve_auto_k,
)
from specdec_core.errors import SpecdecError


def register(sub: argparse._SubParsersAction) -> None:
    from specdec_core.run.method_kinds import HF_METHODS, METHOD_NAMES

    parser = sub.add_parser("bench", help="compare methods on a prompt file in one run")
    parser.add_argument(
        "--methods",
        default="ar,classic",
        help=f"comma-separated: {','.join([*METHOD_NAMES, *HF_METHODS])}; an entry "
        "METHOD[@SPEC][:POLICY[:NAME=VALUE[/NAME=VALUE...]]] runs METHOD with its own head or "
        "draft SPEC (embedded, a directory or a hub id; no ':') and/or that policy, so several "
        "heads or policies compare in one run against the same ar, e.g. "
        "ar,eagle@embedded,eagle@heads/new,ngram:threshold:tau=0.3,eagle@heads/new:typical. "
        "The table adds fidelity to ar: prefix (share of tokens before the first difference), "
        "tokens (position-wise agreement), logp (mean target log-prob per token), and the "
        "distance from the target's distribution: TV and KL per token (0 for lossless "
        "entries; docs/policies.md)",
    )
    parser.add_argument("--prompts", required=True, help="JSONL with 'prompt' or 'turns'")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--json-out", default=None)
    parser.add_argument("--csv-out", default=None)
    parser.add_argument(
        "--multi-turn",
        action="store_true",
        help="replay every user turn of each line's 'turns' (a saved chat, MT-Bench files): "
        "each method answers with its own replies as the history and reuses its cache",
    )
    parser.add_argument(
        "--reference",
        default="same",
        choices=["same", "fp32"],
        help="same (default): every entry is checked against ar in the run's dtype. fp32: "
        "also run ar once per prompt with the target in float32 (not timed), report "
        "identical_to_fp32 and, greedy, each row's fp32_check (how many tokens agree before "
        "the first difference from fp32 ar, and its margin), and measure every first "
        "difference in float32: checks a bf16 / fp16 run against the model's own arithmetic",
    )
    parser.add_argument(
        "--suffix-history",
        default="own",
        choices=["own", "shared"],
        help="what the suffix methods (suffix, eagle2-suffix) draft from: own (default, fair): "
        "each entry's own runs of the earlier prompts; shared: one history for all entries, so "
        "a suffix entry also copies the output of the entries run before it on the same prompt "
        "(an agent loop); the table and JSON say which",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="after the table, where each entry's step goes: ms per step in draft, target "
        "forward, acceptance, cache keep, commit and the loop, the same in ar steps of this "
        "run, the step's cost in ar steps and the draft's parts (EAGLE: head, tree, merge); "
        "--json-out then adds profile, profile_ar_steps, draft_parts and step_cost_ar_steps",
    )
    add_model_options(parser)
    add_decode_options(parser)
    add_policy_profile_option(parser)
    add_adapt_options(parser)
    parser.set_defaults(handler=run, invocation=None)


def run(args: argparse.Namespace) -> int:
    from specdec_core.environment import command_line, current_environment
    from specdec_core.measurement.bench import (
        format_table,
        run_bench,
        stderr_progress,
        write_outputs,
    )
    from specdec_core.measurement.bench_entries import entry_method, parse_entry
    from specdec_core.measurement.step_profile import format_profile
    from specdec_core.models.loading import load_model
    from specdec_core.run.method_kinds import HF_METHODS
    from specdec_core.run.methods import METHODS, check_method_params
    from specdec_core.run.prompts import read_conversations, read_prompt_file

    config = decode_config(args)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if entry_method(m) not in (*METHODS, *HF_METHODS)]
    if unknown:
        known = ", ".join([*METHODS, *HF_METHODS])
        raise SpecdecError(f"unknown method(s) {', '.join(unknown)}; choose from: {known}")
    for entry in (parse_entry(m, config) for m in methods):
        check_policy(entry.config)
    check_method_params([entry_method(m) for m in methods], config.method_params)
    profile = policy_profile(args, config)
    adapting = adapt_settings(args, methods)
    if args.multi_turn:
        prompts = read_conversations(args.prompts, args.limit)
        texts = ["".join(turns) for turns in prompts]  # a whole conversation in the context
    else:
        prompts = texts = read_prompt_file(args.prompts, args.limit)
    options = load_options(args, texts)
    target = load_model(args.target, args.device, args.dtype, load_progress(), options=options)
    config = resolve_auto_k(args, config, target, methods)
    hook = None
    if adapting is not None:
        from specdec_core.training.adaptation import BetweenPrompts

        hook = BetweenPrompts(target, args.adapt_seconds, adapting, args.head)
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
        multi_turn=args.multi_turn,
        after_prompt=hook,
        suffix_history=args.suffix_history,
        profile=profile,
    )
    if profile is not None:
        result.config["policy_profile"] = args.policy_profile
    result.config["environment"] = current_environment(
        target.device, args.invocation or command_line()
    ).to_record()
    if hook is not None:
        result.config["adaptation"] = hook.record()
        for method, adapter in hook.adapters.items():
            print(f"\n[adapt] {method}: {adapter.tau_line()}", file=sys.stderr)
        if args.save_adapted and hook.adapters:
            saved = next(iter(hook.adapters.values())).save(args.save_adapted)
            print(f"[adapt] saved to {saved}", file=sys.stderr)
    print(file=sys.stderr)
    print(format_table(result))
    if args.profile:
        print()
        print(format_profile(result.methods))
    write_outputs(result, args.json_out, args.csv_out, args.profile)
    return 0
