"""`specdec generate`: one method on one prompt, the text (or one JSON object) and its timing."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from specdec_core.cli.options import (
    adapt_settings,
    add_adapt_options,
    add_decode_options,
    add_model_options,
    add_policy_profile_option,
    decode_config,
    load_progress,
    load_target,
    model_specs,
    policy_profile,
    resolve_auto_k,
)
from specdec_core.decoding.events import RunSummary
from specdec_core.errors import SpecdecError

if TYPE_CHECKING:
    from specdec_core.decoding.config import DecodeConfig
    from specdec_core.measurement.reference_check import ReferenceCheck
    from specdec_core.models.loading import LoadedModel


def register(sub: argparse._SubParsersAction) -> None:
    from specdec_core.run.method_kinds import METHOD_NAMES

    parser = sub.add_parser("generate", help="generate once and report timing and acceptance")
    parser.add_argument("--method", default="ar", choices=list(METHOD_NAMES))
    parser.add_argument("--prompt", default=None)
    parser.add_argument("--prompt-file", default=None)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--reference",
        default="none",
        choices=["none", "same", "fp32"],
        help="greedy only: after the run, check its output against ar's (untimed): same: ar "
        "in the run's dtype (a lossless method equals it token for token); fp32: that and ar "
        "with the target in float32, the model's own output (a bf16 / fp16 run may part from "
        "it at a float near-tie). Says identical, or the first differing token and how many "
        "tokens agree before it (--json: reference_checks)",
    )
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
    if args.reference != "none" and not config.greedy:
        raise SpecdecError(
            "--reference compares greedy outputs (at --temperature above 0 they differ by "
            "design); use --temperature 0 or --reference none"
        )
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
    checks = _reference_checks(args, target, prompt_ids, summary.token_ids, config)
    if args.json:
        record = summary.to_record()
        record.update(device=str(target.device), dtype=target.dtype_name)
        if checks:
            record["reference_checks"] = [check.to_record() for check in checks]
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
    for check in checks:
        print(f"[reference] {check.line(target.tokenizer.decode)}", file=sys.stderr)
    return 0


def _reference_checks(
    args: argparse.Namespace,
    target: LoadedModel,
    ids: list[int],
    output: tuple[int, ...],
    config: DecodeConfig,
) -> list[ReferenceCheck]:
    """`--reference`: the output against `ar` in the run's dtype and, with fp32 where the run
    is not float32, against `ar` with the target loaded again in float32 (`ReferenceCheck`s)."""
    from specdec_core.measurement.reference_check import check, reference_output
    from specdec_core.models.loading import load_model

    if args.reference == "none":
        return []
    checks = [check(target, ids, output, reference_output(target, ids, config))]
    if args.reference == "fp32" and target.dtype_name != "float32":
        exact = load_model(
            args.target, str(target.device), "float32", load_progress(args.json),
            options=target.options,
        )  # fmt: skip
        reference = reference_output(exact, ids, config)
        checks.append(check(exact, ids, output, reference, target.dtype))
    return checks


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
