"""`specdec train mlp-speculator`: its command line (the training is in
specdec_core/training/mlp_speculator.py). `add_parser(subparsers)` declares the subcommand on
`specdec train`'s subparsers; `run(args)` trains and prints the card's summary as JSON."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from specdec_core.cli.options import add_exclude_prompts, parse_tokens

if TYPE_CHECKING:
    from specdec_core.training.mlp_speculator import SpeculatorRequest


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "mlp-speculator",
        help="train an MLP speculator (IBM fms-extras, as vLLM loads it) on the target's "
        "hidden states",
    )
    parser.set_defaults(handler=run, invocation=None)
    parser.add_argument("--target", default="embedded", help="embedded, hub id, dir or .gguf")
    parser.add_argument(
        "--data",
        default="self",
        help="sharegpt, self, self-long, magpie, FILE.jsonl, FILE.npz or a `specdec data` job "
        "folder (as `specdec train eagle`); comma-separated to combine",
    )
    add_exclude_prompts(parser, "a prompt --data magpie writes")
    parser.add_argument(
        "--tokens", default="1000000", help="token budget (one, or one per --data source)"
    )
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument(
        "--n-predict",
        type=int,
        default=None,
        help="stages, the longest chain it drafts (default 3, or the --init speculator's)",
    )
    parser.add_argument(
        "--inner-dim",
        type=int,
        default=None,
        help="width of the stages (default 0: the target's hidden size). Each stage has a "
        "vocabulary-sized embedding and head, so this sets most of the size",
    )
    parser.add_argument(
        "--tie-weights",
        action="store_true",
        default=None,
        help="one embedding, head, norm and inner projection shared by every stage (vLLM's "
        "tie_weights): about 1/n_predict of the size",
    )
    parser.add_argument(
        "--scale-input",
        action="store_true",
        default=None,
        help="normalise the target's hidden state before the first stage (scale_input)",
    )
    parser.add_argument(
        "--init", default=None, help="continue this trained speculator (embedded, dir, hub id)"
    )
    parser.add_argument("--out", required=True, help="output directory (also resumes from it)")
    parser.add_argument("--work", default=None, help="cache for data and features (OUT/work)")
    parser.add_argument(
        "--cached-only",
        action="store_true",
        help="self-distillation: use only the answers already generated in --work",
    )
    parser.add_argument("--max-len", type=int, default=512, help="tokens per training sequence")
    parser.add_argument("--batch-tokens", type=int, default=2048)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--seconds",
        type=float,
        default=None,
        help="time budget in seconds, from the features to the end of training",
    )
    parser.add_argument(
        "--save-every", type=int, default=100, help="optimiser steps between checkpoints"
    )
    parser.add_argument("--val-prompts", type=int, default=4, help="held-out prompts for tau")
    parser.add_argument(
        "--val-kinds",
        type=int,
        default=3,
        help="held-out prompts per kind for the card's validation_by_kind table (0 = none)",
    )
    parser.add_argument("--device", default="cpu", choices=["auto", "cpu", "cuda", "mps"])
    parser.add_argument(
        "--feature-dtype",
        default="bfloat16",
        choices=["auto", "float32", "float16", "bfloat16"],
        help="target dtype for data generation and features",
    )
    parser.add_argument(
        "--save-dtype",
        default="bfloat16",
        choices=["float32", "bfloat16", "float16"],
        help="dtype of the saved weights",
    )
    return parser


def request_from_args(args: argparse.Namespace) -> SpeculatorRequest:
    """The parsed command line as a checked `SpeculatorRequest` (refused before a model loads)."""
    from specdec_core.environment import command_line
    from specdec_core.training.mlp_speculator import SpeculatorRequest

    per_source = ", or one per --data source (comma-separated)"
    return SpeculatorRequest(
        out=args.out,
        target=args.target,
        data=tuple(s.strip() for s in args.data.split(",") if s.strip()),
        tokens=tuple(parse_tokens(t, per_source) for t in str(args.tokens).split(",")),
        epochs=args.epochs,
        n_predict=args.n_predict,
        inner_dim=args.inner_dim,
        tie_weights=args.tie_weights,
        scale_input=args.scale_input,
        init=args.init or None,
        work=args.work,
        cached_only=args.cached_only,
        max_len=args.max_len,
        batch_tokens=args.batch_tokens,
        lr=args.lr,
        seed=args.seed,
        val_prompts=args.val_prompts,
        val_kinds=args.val_kinds,
        device=args.device,
        feature_dtype=args.feature_dtype,
        save_dtype=args.save_dtype,
        seconds=args.seconds,
        save_every=args.save_every,
        command=args.invocation or command_line(),
        exclude_prompts=tuple(p.strip() for p in args.exclude_prompts.split(",") if p.strip()),
    )


def run(args: argparse.Namespace) -> int:
    from specdec_core.training.mlp_speculator import train_speculator

    request = request_from_args(args)
    try:
        card = train_speculator(request)
    except KeyboardInterrupt:
        checkpoint = Path(request.out) / "checkpoint.pt"
        where = (
            f"run the same command again to resume from {checkpoint}"
            if checkpoint.is_file()
            else "no checkpoint was written yet; run the same command again to start over"
        )
        print(f"specdec: training interrupted; {where}", file=sys.stderr)
        return 130
    record = card.to_record()
    keys = ("kind", "tokens", "epochs", "validation", "validation_by_kind")
    summary = {k: record[k] for k in keys if k in record}
    summary["teacher_forced_top1_by_stage"] = record.get("teacher_forced_top1_by_stage")
    print(json.dumps(summary))
    return 0
