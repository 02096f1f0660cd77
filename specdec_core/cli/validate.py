"""`specdec validate`: how well an EAGLE head drafts on each kind of request.

Teacher-forced top-1 against the target and the τ of real greedy decoding (k = 4, 48 tokens) on
the built-in held-out prompts of every kind (`training.kinds.HELD_OUT`, never trained on): the
table `specdec train` writes into a card's `validation_by_kind`, for any head, the bundled ones
and published ones included, so two heads are compared on the same prompts.
"""

from __future__ import annotations

import argparse
import json
import re

from specdec_core.cli.training_options import add_device_options
from specdec_core.errors import SpecdecError


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "validate", help="an EAGLE head's top-1 and tau on held-out prompts of every kind"
    )
    parser.add_argument(
        "--head",
        default="embedded",
        help="EAGLE head: embedded (bundled), embedded-eagle3 (bundled EAGLE-3), embedded-vN "
        "(one it replaced), a folder or hub id",
    )
    parser.add_argument("--target", default="embedded", help="embedded, hub id, dir or .gguf")
    parser.add_argument("--per-kind", type=int, default=3, help="held-out prompts per kind")
    parser.add_argument(
        "--unroll", type=int, default=2, help="passes the teacher-forced top-1 averages"
    )
    parser.add_argument(
        "--work",
        default=None,
        help="cache of the target's answers and features (default: in the user cache, per "
        "target); a training run's --work holds the same files",
    )
    add_device_options(
        parser,
        device="auto",
        dtype_flag="--dtype",
        dtype_help="the target's dtype for answers and features (default bfloat16, as training)",
    )
    parser.add_argument(
        "--no-tau", action="store_true", help="top-1 only: skip decoding (seconds, not minutes)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    import torch

    from specdec_core.heads.eagle.formats import check_head_spec
    from specdec_core.models.loading import cache_root, load_model
    from specdec_core.resources import names_bundled_head
    from specdec_core.run.runner import load_head
    from specdec_core.training.validation import head_by_kind

    if args.per_kind < 1:
        raise SpecdecError(f"--per-kind {args.per_kind}: give 1 or more prompts per kind")
    if args.unroll < 1:
        raise SpecdecError(f"--unroll {args.unroll}: give 1 or more passes")
    if not names_bundled_head(args.head):
        check_head_spec(args.head)  # refused before the target loads
    target = load_model(args.target, args.device, args.dtype)
    head = load_head(args.head, target, torch.float32)
    work = Path(args.work) if args.work else cache_root() / "validate" / _slug(args.target)
    with torch.no_grad():
        table = head_by_kind(target, head, work, args.per_kind, args.unroll, not args.no_tau)
    top1 = sum(v.teacher_forced_top1 for v in table.values()) / len(table)
    tau = None if args.no_tau else sum(v.tau for v in table.values()) / len(table)
    if args.json:
        record = {kind: v.to_record() for kind, v in table.items()}
        means = {"mean_top1": round(top1, 4), **({"mean_tau": round(tau, 3)} if tau else {})}
        print(json.dumps({"head": args.head, "unroll": args.unroll, "by_kind": record, **means}))
        return 0
    print(f"{'kind':<15}{'top-1':>8}{'tau':>8}")
    for kind, v in table.items():
        print(f"{kind:<15}{v.teacher_forced_top1:>8.3f}{_number(v.tau)}")
    print(f"{'mean':<15}{top1:>8.3f}{_number(tau)}")
    return 0


def _number(tau: float | None) -> str:
    return f"{'-':>8}" if tau is None else f"{tau:>8.2f}"


def _slug(spec: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", spec).strip("_") or "target"
