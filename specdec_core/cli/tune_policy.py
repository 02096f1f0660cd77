"""`specdec tune-policy`: per kind of request, the loosest parameter of a lossy policy whose
distance from the target's distribution stays under a bound; writes a policy profile
(`specdec_core.run.policy_profile`) that `bench --policy-profile` uses."""

from __future__ import annotations

import argparse
import math
import sys
from typing import TYPE_CHECKING

from specdec_core.cli.options import (
    add_decode_options,
    add_model_options,
    decode_config,
    load_target,
    model_specs,
    resolve_auto_k,
)
from specdec_core.errors import SpecdecError

if TYPE_CHECKING:
    from specdec_core.run.policy_profile import PolicyProfile


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "tune-policy",
        help="per kind of request, the loosest policy parameter within a distance; writes a "
        "policy profile",
    )
    parser.add_argument(
        "--max-distance",
        type=float,
        required=True,
        help="the largest total variation per token (0-1) from the target's distribution a "
        "kind may reach, e.g. 0.05",
    )
    parser.add_argument(
        "--prompts",
        required=True,
        help="JSONL prompt file; each line's 'kind' (else 'category', else general) is its kind",
    )
    parser.add_argument("--limit", type=int, default=None, help="prompts per kind")
    parser.add_argument(
        "--method", default="ngram", help="the method whose drafts the policy verifies"
    )
    parser.add_argument(
        "--param",
        default=None,
        help="the parameter to tune (default: the policy's main one: tau, epsilon, "
        "logit_tau, w, entropy_threshold); a lower value is looser",
    )
    parser.add_argument(
        "--values",
        default=None,
        help="comma-separated values to try (default: a grid per policy); each is measured "
        "and the loosest (lowest) within --max-distance is kept",
    )
    parser.add_argument(
        "--out", default="policy-profile.json", help="the profile file (JSON) to write"
    )
    add_model_options(parser)
    add_decode_options(parser)
    parser.set_defaults(handler=run, invocation=None)


def run(args: argparse.Namespace) -> int:
    from specdec_core.measurement.bench import stderr_progress
    from specdec_core.run.methods import METHODS, check_method_params
    from specdec_core.run.runner import load_extra
    from specdec_core.tuning.policy_tuning import read_kinds, tunable, tune

    config = decode_config(args)
    if args.method not in METHODS:
        raise SpecdecError(f"unknown method '{args.method}'; choose from: {', '.join(METHODS)}")
    check_method_params([args.method], config.method_params)
    if not math.isfinite(args.max_distance) or not 0 <= args.max_distance <= 1:
        raise SpecdecError(
            f"--max-distance is a total variation in [0, 1] (got {args.max_distance})"
        )
    grid = tunable(config.policy, args.param, _values(args.values))
    prompts = read_kinds(args.prompts, args.limit)
    texts = [text for kind in prompts.values() for text in kind]
    target = load_target(args, texts)
    extra = load_extra(args.method, target, model_specs(args))
    config = resolve_auto_k(args, config, target, [args.method], extra)
    profile = tune(
        target, args.method, prompts, config, grid, args.max_distance, extra, args.raw,
        progress=stderr_progress,
    )  # fmt: skip
    saved = profile.save(args.out)
    print(file=sys.stderr)
    print(format_profile(profile))
    print(f"\nwrote {saved}; use it with --policy-profile {saved}", file=sys.stderr)
    return 0


def format_profile(profile: PolicyProfile) -> str:
    """One row per kind: prompts, the value chosen (lossless where none stays within the
    bound), its TV and KL, and every value tried."""
    width = max([6, *(len(kind.kind) + 2 for kind in profile.kinds)])
    header = (
        f"{'kind':<{width}}{'prompts':>8}{profile.param:>12}{'TV':>8}{'KL':>8}  tried (value: TV)"
    )
    lines = [header, "-" * len(header)]
    for kind in profile.kinds:
        value = "lossless" if kind.value is None else f"{kind.value:g}"
        tv = "-" if kind.total_variation is None else f"{kind.total_variation:.3f}"
        kl = "inf" if kind.kl is None else f"{kind.kl:.3f}"  # None: a token's KL is infinite
        tried = ", ".join(f"{v:g}: {'-' if t is None else f'{t:.3f}'}" for v, t, _ in kind.trials)
        lines.append(f"{kind.kind:<{width}}{kind.prompts:>8}{value:>12}{tv:>8}{kl:>8}  {tried}")
    lines.append(
        f"(policy {profile.policy}, at most {profile.max_distance:g} total variation per token)"
    )
    return "\n".join(lines)


def _values(text: str | None) -> list[float]:
    if not text:
        return []
    try:
        return [float(value) for value in text.split(",") if value.strip()]
    except ValueError:
        raise SpecdecError(f"--values expects numbers separated by commas (got '{text}')") from None
