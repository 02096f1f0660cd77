"""`specdec generate`: one method on one prompt, the text (or one JSON object) and its timing."""

from __future__ import annotations

import argparse
import json
import sys

from specdec_core.cli.options import (
    adapt_settings,
    add_adapt_options,
    add_decode_options,
    add_model_options,
    add_policy_profile_option,
    decode_config,
    load_target,
    model_specs,
    policy_profile,
    resolve_auto_k,
)
from specdec_core.decoding.events import RunSummary
from specdec_core.errors import SpecdecError


def register(sub: argparse._SubParsersAction) -> None:
    from specdec_core.run.method_kinds import METHOD_NAMES

    parser = sub.add_parser("generate", help="generate once and report timing and acceptance")
    parser.add_argument("--method", default="ar", choices=list(METHOD_NAMES))
    parser.add_argument("--prompt", default=None)
    parser.add_argument("--prompt-file", default=None)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_model_options(parser)
    add_decode_options(parser)
    add_adapt_options(parser)
    add_policy_profile_option(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from specdec_core.run.methods import check_method_params
    from specdec_core.run.policy_profile import POLICY_KIND
    from specdec_core.run.prompts import check_prompt_text, encode_prompt, read_prompt_file
    from specdec_core.run.runner import load_extra
    from specdec_core.run.runner import run as run_method

    config = decode_config(args)
    check_method_params([args.method], config.method_params)
    adapting = adapt_settings(args, [args.method])
    profile = policy_profile(args, config)
    if args.prompt is None and args.prompt_file is None:
        raise SpecdecError("no prompt; pass --prompt TEXT or --prompt-file FILE.jsonl")
    text = args.prompt if args.prompt is not None else read_prompt_file(args.prompt_file, 1)[0]
    check_prompt_text(text)  # before minutes of model loading
    target = load_target(args, [text], quiet=args.json)
    prompt_ids = encode_prompt(target.tokenizer, text, args.raw)
    extra = load_extra(args.method, target, model_specs(args))
    config = resolve_auto_k(args, config, target, [args.method], extra)
    summary = run_method(
        target, args.method, prompt_ids, config, extra, profile=profile, prompt_text=text
    )
    kind = summary.config.get(POLICY_KIND)
    if kind is not None:
        print(f"[policy profile] {_picked(kind, summary)}", file=sys.stderr)
    if adapting is not None:
        _adapt(args, target, extra, adapting, prompt_ids, summary)
    if args.json:
        record = summary.to_record()
        record.update(device=str(target.device), dtype=target.dtype_name)
        if profile is not None:
            record.update(policy_profile=args.policy_profile, policy_kind=kind)
        print(json.dumps(record))
        return 0
    print(summary.text)
    lossy = " (LOSSY policy)" if summary.lossy else ""
    print(
        f"\n[{summary.method}{lossy}] {summary.new_tokens} tokens in {summary.steps} steps, "
        f"tau {summary.mean_accept_length:.2f}, {summary.tokens_per_second:.1f} tok/s, "
        f"stop: {summary.stop_reason}",
        file=sys.stderr,
    )
    if "tree_sizing" in summary.config:  # a tree method: the size it used and why
        c = summary.config
        print(
            f"[tree] {c['tree_tokens']} tokens, depth {c['tree_depth']}, top-k "
            f"{c['tree_topk']} ({c['tree_sizing']})",
            file=sys.stderr,
        )
    return 0


def _picked(kind: str, summary: RunSummary) -> str:
    """'kind code: threshold tau=0.1', or the lossless rule the profile gave the kind."""
    params = summary.config.get("policy_params") or {}
    words = " ".join(f"{name}={value:g}" for name, value in params.items())
    return f"kind {kind}: {summary.policy} {words}".rstrip()


def _adapt(args, target, head, settings, prompt_ids, summary) -> None:
    """`--adapt`: the head learns from this run (and is saved with --save-adapted)."""
    from specdec_core.training.adaptation import Adapter

    adapter = Adapter(head, target, settings, source=args.head)
    adapter.add_run(prompt_ids, summary.token_ids, summary.mean_accept_length)
    report = adapter.adapt(args.adapt_seconds)
    print(
        f"[adapt] {report.steps} steps in {report.seconds:.2f}s on {report.buffer_tokens} tokens",
        file=sys.stderr,
    )
    if args.save_adapted:
        print(f"[adapt] saved to {adapter.save(args.save_adapted)}", file=sys.stderr)
