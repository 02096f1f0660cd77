"""`specdec`: the headless interface (DESIGN.md §3). Benchmarks depend on it; keep it stable.

Bad input raises `SpecdecError`, printed as one line on stderr with exit code 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable

from specdec_core.errors import SpecdecError

COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {}
AUTO = "auto"


def command(name: str):
    def register(function: Callable[[argparse.Namespace], int]):
        COMMANDS[name] = function
        return function

    return register


def add_model_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", default="embedded", help="embedded, hub id, dir or .gguf")
    parser.add_argument("--draft", default="embedded", help="classic draft model spec")
    parser.add_argument("--head", default="embedded", help="EAGLE head spec")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "mps"])
    parser.add_argument(
        "--dtype", default="auto", choices=["auto", "float32", "float16", "bfloat16"]
    )


def add_decode_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument(
        "--k", type=k_value, default=4, help="draft length for chain methods, or auto (measured)"
    )
    parser.add_argument(
        "--k-schedule",
        default="fixed",
        choices=["fixed", "adaptive"],
        help="adaptive: k grows after a fully accepted draft, shrinks after a rejection",
    )
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tree-depth", type=int, default=None)
    parser.add_argument("--tree-topk", type=int, default=None)
    parser.add_argument("--tree-tokens", default="auto", help="tree size, or auto")
    parser.add_argument(
        "--ngram-max", type=int, default=3, help="longest n-gram the ngram drafter looks up"
    )
    parser.add_argument(
        "--policy",
        default="lossless",
        help=f"verification policy with its parameters and defaults: {_policies()}. "
        "Lossy ones trade fidelity for acceptance and are marked LOSSY in all output; "
        "tree methods (eagle2, eagle2-lookup) take lossless only",
    )
    parser.add_argument(
        "--policy-param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a policy parameter, e.g. --policy-param tau=0.3 (repeatable): tau (threshold, "
        "cosine, ngram), epsilon and delta (typical), n, ngram_tau and logit_tau (ngram, "
        "hybrid), w (ensemble)",
    )
    parser.add_argument("--raw", action="store_true", help="do not apply the chat template")


def k_value(text: str) -> int | str:
    """`--k`: a draft length, or 'auto' (a short sweep picks it; `specdec_core.autotune`)."""
    if text == AUTO:
        return AUTO
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or 'auto', got '{text}'") from None


def build_parser() -> argparse.ArgumentParser:
    from specdec_core.baselines import HF_METHODS
    from specdec_core.methods import METHODS

    parser = argparse.ArgumentParser(prog="specdec", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    gen = sub.add_parser("generate", help="generate once and report timing and acceptance")
    gen.add_argument("--method", default="ar", choices=list(METHODS))
    gen.add_argument("--prompt", default=None)
    gen.add_argument("--prompt-file", default=None)
    gen.add_argument("--json", action="store_true", help="print one JSON object")
    add_model_options(gen)
    add_decode_options(gen)

    bench = sub.add_parser("bench", help="compare methods on a prompt file in one run")
    bench.add_argument(
        "--methods",
        default="ar,classic",
        help=f"comma-separated: {','.join([*METHODS, *HF_METHODS])}; an entry "
        "METHOD:POLICY[:NAME=VALUE[/NAME=VALUE...]] runs METHOD with that policy, so several "
        "policies compare in one run, e.g. ar,ngram,ngram:threshold:tau=0.3,ngram:typical. "
        "The table adds fidelity to ar: prefix (share of tokens before the first difference), "
        "tokens (position-wise agreement), logp (mean target log-prob per token)",
    )
    bench.add_argument("--prompts", required=True, help="JSONL with 'prompt' or 'turns'")
    bench.add_argument("--limit", type=int, default=None)
    bench.add_argument("--json-out", default=None)
    bench.add_argument("--csv-out", default=None)
    add_model_options(bench)
    add_decode_options(bench)

    from specdec_core.cli_tuning import add_parsers  # sweep, export

    COMMANDS.update(add_parsers(sub))  # not via @command: under `python -m` this is __main__
    from specdec_core.eagle.cli_train import add_parsers as add_train_parser

    COMMANDS.update(add_train_parser(sub))  # train eagle|draft
    return parser


def decode_config(args: argparse.Namespace):
    from specdec_core.config import DecodeConfig

    k = DecodeConfig.k if args.k == AUTO else args.k  # auto: tuned once the models are loaded
    for name, value, low in (("--max-new-tokens", args.max_new_tokens, 1), ("--k", k, 0)):
        if value < low:
            raise SpecdecError(f"{name} must be at least {low} (got {value})")
    if args.temperature < 0:
        raise SpecdecError(f"--temperature must be >= 0 (got {args.temperature})")
    if not 0 < args.top_p <= 1:
        raise SpecdecError(f"--top-p must be in (0, 1] (got {args.top_p})")
    tree_tokens = None if args.tree_tokens == "auto" else _int(args.tree_tokens, "--tree-tokens")
    return DecodeConfig(
        max_new_tokens=args.max_new_tokens,
        k=k,
        temperature=args.temperature,
        top_p=args.top_p,
        seed=args.seed,
        policy=args.policy,
        policy_params=_params(args.policy_param),
        tree_depth=args.tree_depth,
        tree_topk=args.tree_topk,
        tree_tokens=tree_tokens,
        ngram_max=args.ngram_max,
        k_schedule=getattr(args, "k_schedule", "fixed"),
    )


def _policies() -> str:
    from specdec_core.verifiers import describe_policies

    return describe_policies().replace("%", "%%")


def check_policy(policy: str, params: dict[str, float]) -> None:
    """Fail before any model loads: an unknown policy or parameter is bad input."""
    from specdec_core.verifiers import make_verifier

    make_verifier(policy, **params)


def _int(text: str, name: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise SpecdecError(f"{name} must be an integer or 'auto' (got '{text}')") from None


def _params(items: list[str]) -> dict[str, float]:
    params = {}
    for item in items:
        name, _, value = item.partition("=")
        try:
            params[name.strip()] = float(value)
        except ValueError:
            raise SpecdecError(f"--policy-param expects NAME=NUMBER (got '{item}')") from None
    return params


def model_specs(args: argparse.Namespace) -> dict[str, str]:
    return {"draft": args.draft, "head": args.head}


@command("generate")
def cmd_generate(args: argparse.Namespace) -> int:
    from specdec_core.cli_tuning import resolve_auto_k
    from specdec_core.models import load_model
    from specdec_core.prompts import encode_prompt, read_prompt_file
    from specdec_core.runner import prepare_extra, run

    config = decode_config(args)
    check_policy(config.policy, config.policy_params)
    if args.prompt is None and args.prompt_file is None:
        raise SpecdecError("no prompt; pass --prompt TEXT or --prompt-file FILE.jsonl")
    text = args.prompt if args.prompt is not None else read_prompt_file(args.prompt_file, 1)[0]
    target = load_model(args.target, args.device, args.dtype, progress=_progress(args))
    prompt_ids = encode_prompt(target.tokenizer, text, args.raw)
    extra = prepare_extra(args.method, target, model_specs(args))
    config = resolve_auto_k(args, config, target, [args.method], extra)
    summary = run(target, args.method, prompt_ids, config, extra)
    record = {
        "method": summary.method,
        "text": summary.text,
        "token_ids": list(summary.token_ids),
        "new_tokens": summary.new_tokens,
        "steps": summary.steps,
        "mean_accept_length": summary.mean_accept_length,
        "tokens_per_second": summary.tokens_per_second,
        "wall_seconds": summary.wall_seconds,
        "draft_seconds": summary.draft_seconds,
        "verify_seconds": summary.verify_seconds,
        "prompt_tokens": summary.prompt_tokens,
        "device": str(target.device),
        "dtype": str(target.dtype).removeprefix("torch."),
        "policy": summary.policy,
        "lossy": summary.lossy,
        "stop_reason": summary.stop_reason,
        "config": summary.config,
    }
    if args.json:
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


@command("bench")
def cmd_bench(args: argparse.Namespace) -> int:
    from specdec_core.baselines import HF_METHODS
    from specdec_core.bench import (
        format_table,
        parse_variant,
        run_bench,
        stderr_progress,
        write_outputs,
    )
    from specdec_core.cli_tuning import resolve_auto_k
    from specdec_core.methods import METHODS
    from specdec_core.models import load_model
    from specdec_core.prompts import read_prompt_file

    config = decode_config(args)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    base = {m: m.partition(":")[0] for m in methods}
    unknown = [m for m in methods if base[m] not in METHODS and base[m] not in HF_METHODS]
    if unknown:
        known = ", ".join([*METHODS, *HF_METHODS])
        raise SpecdecError(f"unknown method(s) {', '.join(unknown)}; choose from: {known}")
    for variant in (parse_variant(m, config) for m in methods):
        check_policy(variant[1].policy, variant[1].policy_params)
    prompts = read_prompt_file(args.prompts, args.limit)
    target = load_model(args.target, args.device, args.dtype, progress=_progress(args))
    config = resolve_auto_k(args, config, target, methods)
    result = run_bench(
        target, methods, prompts, config, model_specs(args), args.raw, progress=stderr_progress
    )
    print(file=sys.stderr)
    print(format_table(result))
    write_outputs(result, args.json_out, args.csv_out)
    return 0


def _progress(args: argparse.Namespace):
    if getattr(args, "json", False):
        return None
    return lambda message, fraction: print(f"[{fraction:4.0%}] {message}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except SpecdecError as error:
        print(f"specdec: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("specdec: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
