"""`specdec train {eagle,draft,medusa}`: its command line (the drivers are in
specdec_core/training: driver.py for eagle and draft, medusa.py for Medusa heads)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from specdec_core.cli.options import add_exclude_prompts, parse_tokens

if TYPE_CHECKING:
    from specdec_core.training.medusa import MedusaTrainRequest
    from specdec_core.training.request import TrainRequest


def register(sub: argparse._SubParsersAction) -> None:
    train = sub.add_parser(
        "train",
        help="train an EAGLE head, a token-level draft, Medusa heads or (`train mlp-speculator "
        "--help`) an MLP speculator",
    )
    train.set_defaults(handler=run, invocation=None)
    train.add_argument("kind", choices=["eagle", "draft", "medusa"])
    train.add_argument("--target", default="embedded", help="embedded, hub id, dir or .gguf")
    train.add_argument(
        "--data",
        default="self",
        help="sharegpt, self (the target's own answers to ShareGPT prompts of up to 256 "
        "tokens), self-long (to the prompts of 257-1024 tokens), magpie (to prompts the target "
        "writes itself, for writing, coding, maths, extraction, role-play, summarisation and "
        "QA), FILE.jsonl, or FILE.npz (answers saved by scripts/gpu_distill.py); "
        "comma-separated to combine, e.g. self,magpie",
    )
    add_exclude_prompts(train, "a prompt --data magpie writes")
    train.add_argument(
        "--val-kinds",
        type=int,
        default=3,
        help="held-out prompts per kind for the card's validation_by_kind table (top-1 and tau "
        "per kind, after training; 0 = none)",
    )
    train.add_argument(
        "--tokens", default="1000000", help="token budget (one, or one per --data source)"
    )
    train.add_argument("--epochs", type=int, default=2)
    train.add_argument(
        "--init",
        default=None,
        help="eagle: start from this trained head (its weights and draft vocabulary), "
        "e.g. embedded, to continue it on new data with a fresh schedule",
    )
    train.add_argument(
        "--arch",
        choices=["eagle1", "eagle3"],
        default=None,
        help="eagle: head layout. eagle1 (default): predicts the target's next top-layer "
        "feature; eagle3: reads three target layers, predicts tokens only (EAGLE-3). "
        "Default with --init: that head's layout",
    )
    train.add_argument(
        "--layers",
        type=int,
        default=None,
        help="eagle1: decoder layers of the head (default 1, or the --init head's; more than "
        "the --init head has grows it, the new layers starting as the identity). Each layer "
        "adds about a layer's cost to every draft step. medusa: residual blocks per head "
        "(default 1, Medusa-1)",
    )
    train.add_argument(
        "--heads",
        type=int,
        default=4,
        help="medusa: heads; head i predicts the token i + 2 after the target's state",
    )
    train.add_argument(
        "--lm-head",
        choices=["own", "target"],
        default="own",
        help="medusa: own (each head trains its own lm head, started from the target's; "
        "Medusa-1) or target (one lm head, the target's rows, not trained: a small file)",
    )
    train.add_argument("--out", required=True, help="output directory (also resumes from it)")
    train.add_argument("--work", default=None, help="cache for data and features (OUT/work)")
    train.add_argument(
        "--cached-only",
        action="store_true",
        help="self-distillation: use only the answers already generated in --work",
    )
    train.add_argument(
        "--draft-vocab",
        type=int,
        default=None,
        help="eagle, medusa: tokens the head drafts over, the most frequent of the data "
        "(default 8192, or the --init head's; 0 = full vocabulary). With --init, an EAGLE-1 "
        "head takes a new size: its weights carry over and the vocabulary is picked anew from "
        "the data. Medusa heads over the full vocabulary are saved in FasterDecoding's layout, "
        "over a reduced one in vLLM's (its token_map)",
    )
    train.add_argument("--max-len", type=int, default=512, help="tokens per training sequence")
    train.add_argument("--batch-tokens", type=int, default=4096)
    train.add_argument("--lr", type=float, default=1e-3)
    train.add_argument(
        "--unroll", type=int, default=2, help="eagle: draft steps simulated per position"
    )
    train.add_argument(
        "--input-norms",
        action="store_true",
        help="eagle3: an RMSNorm on each target layer the head reads, before fc (EAGLE 3.1), "
        "which SpecForge reports makes heads robust to template and domain changes",
    )
    train.add_argument(
        "--noise",
        type=float,
        default=None,
        help="eagle: width of the uniform noise on the head's input features during training "
        "(default: 0.2 for eagle1, 0 for eagle3)",
    )
    train.add_argument(
        "--ce-weight",
        type=float,
        default=None,
        help="eagle: weight of the token loss beside the feature loss (eagle1 default 0.1; "
        "eagle3 has only the token loss)",
    )
    train.add_argument("--seed", type=int, default=0)
    train.add_argument(
        "--seconds",
        type=float,
        default=None,
        help="time budget in seconds, from the features to the end of training; the schedule "
        "decays over whichever ends first, the epochs or the time",
    )
    train.add_argument(
        "--progress-file",
        default=None,
        help="write the progress as JSON here, atomically, as training goes: epoch, step, "
        "steps, tokens_per_s, eta_s, validation (per epoch), finished",
    )
    train.add_argument(
        "--save-every",
        type=int,
        default=100,
        help="optimiser steps between checkpoints (one also ends each epoch); an interrupted "
        "run given the same command resumes from its last checkpoint",
    )
    train.add_argument("--val-prompts", type=int, default=4, help="held-out prompts for tau")
    train.add_argument("--device", default="cpu", choices=["auto", "cpu", "cuda", "mps"])
    train.add_argument(
        "--feature-dtype",
        default="bfloat16",
        choices=["auto", "float32", "float16", "bfloat16"],
        help="target dtype for data generation and features (bf16: ~2x faster on a CPU)",
    )


def request_from_args(args: argparse.Namespace) -> TrainRequest:
    """The parsed `specdec train` command line as a `TrainRequest` (checked: refused here, before
    any model loads, if it cannot work)."""
    from specdec_core.environment import command_line
    from specdec_core.training.request import TrainRequest

    per_source = ", or one per --data source (comma-separated)"
    tokens = tuple(parse_tokens(t, per_source) for t in str(args.tokens).split(","))
    return TrainRequest(
        trains=args.kind,
        out=args.out,
        target=args.target,
        data=tuple(s.strip() for s in args.data.split(",") if s.strip()),
        tokens=tokens,
        epochs=args.epochs,
        init=args.init or None,
        arch=args.arch,
        layers=args.layers,
        work=args.work,
        cached_only=args.cached_only,
        draft_vocab=args.draft_vocab,
        max_len=args.max_len,
        batch_tokens=args.batch_tokens,
        lr=args.lr,
        unroll=args.unroll,
        noise=args.noise,
        input_norms=args.input_norms,
        ce_weight=args.ce_weight,
        seed=args.seed,
        val_prompts=args.val_prompts,
        save_every=args.save_every,
        device=args.device,
        feature_dtype=args.feature_dtype,
        command=args.invocation or command_line(),
        exclude_prompts=tuple(p.strip() for p in args.exclude_prompts.split(",") if p.strip()),
        val_kinds=args.val_kinds,
        seconds=args.seconds,
        progress_file=args.progress_file,
    )


def medusa_request_from_args(args: argparse.Namespace) -> MedusaTrainRequest:
    """The parsed `specdec train medusa` command line as a `MedusaTrainRequest` (checked before
    any model loads); a flag that only an EAGLE head takes is refused."""
    from specdec_core.environment import command_line
    from specdec_core.errors import SpecdecError
    from specdec_core.training.medusa import MedusaTrainRequest

    for flag, value in (
        ("--init", args.init),
        ("--arch", args.arch),
        ("--noise", args.noise),
        ("--ce-weight", args.ce_weight),
        ("--input-norms", args.input_norms or None),
    ):
        if value is not None:
            raise SpecdecError(f"{flag} belongs to EAGLE heads; drop it for `specdec train medusa`")
    per_source = ", or one per --data source (comma-separated)"
    return MedusaTrainRequest(
        out=args.out,
        target=args.target,
        data=tuple(s.strip() for s in args.data.split(",") if s.strip()),
        tokens=tuple(parse_tokens(t, per_source) for t in str(args.tokens).split(",")),
        epochs=args.epochs,
        heads=args.heads,
        layers=args.layers if args.layers is not None else 1,
        lm_head=args.lm_head,
        draft_vocab=args.draft_vocab,
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
        seconds=args.seconds,
        save_every=args.save_every,
        exclude_prompts=tuple(p.strip() for p in args.exclude_prompts.split(",") if p.strip()),
        command=args.invocation or command_line(),
        progress_file=args.progress_file,
    )


def run(args: argparse.Namespace) -> int:
    from specdec_core.training.driver import train_from_request

    if args.kind == "medusa":
        return run_medusa(args)
    request = request_from_args(args)
    try:
        card = train_from_request(request)
    except KeyboardInterrupt:
        checkpoint = request.checkpoint_dir / "checkpoint.pt"
        where = (
            f"run the same command again to resume from {checkpoint}"
            if checkpoint.is_file()
            else "no checkpoint was written yet; run the same command again to start over"
        )
        print(f"specdec: training interrupted; {where}", file=sys.stderr)
        return 130
    record = card.to_record()
    keys = ("kind", "tokens", "epochs", "validation", "validation_by_kind")
    print(json.dumps({k: record[k] for k in keys if k in record}))
    return 0


def run_medusa(args: argparse.Namespace) -> int:
    from specdec_core.training.medusa import train_medusa

    request = medusa_request_from_args(args)
    try:
        card = train_medusa(request)
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
    keys = ("kind", "tokens", "epochs", "validation", "validation_by_kind", "medusa")
    print(json.dumps({k: record[k] for k in keys if k in record}))
    return 0
