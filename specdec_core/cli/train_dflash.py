"""`specdec train dflash`: its command line (the training is in specdec_core/training/dflash.py).
`add_parser(subparsers)` declares the subcommand on `specdec train`'s subparsers; `run(args)`
trains and prints the card's summary as JSON."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from specdec_core.cli.training_options import add_training_options, run_training, training_fields

if TYPE_CHECKING:
    from specdec_core.training.dflash import DFlashRequest


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "dflash",
        help="train a DFlash block drafter (z-lab's layout, as vLLM and SGLang load it) on the "
        "target's hidden states and its own answers",
    )
    parser.set_defaults(handler=run, invocation=None)
    add_training_options(
        parser,
        batch_tokens=2048,
        data_help="a `specdec data` job folder (e.g. resources/corpus/embedded), self, magpie, "
        "sharegpt, FILE.jsonl or FILE.npz (as `specdec train eagle`); comma-separated to combine",
    )
    parser.add_argument(
        "--layers", type=int, default=3, help="draft decoder layers (default 3); it reads as "
        "many target layers, spread as z-lab spreads them"
    )  # fmt: skip
    parser.add_argument(
        "--block-size",
        type=int,
        default=8,
        help="rows of a block: the pending token and block_size − 1 drafted tokens (default 8; "
        "on a CPU every verified row adds to the target's forward)",
    )
    parser.add_argument(
        "--draft-vocab",
        type=int,
        default=8192,
        help="tokens it drafts over, the most frequent of the data (default 8192; 0 = the "
        "target's lm_head over the full vocabulary); its lm_head is most of a draft pass",
    )
    parser.add_argument(
        "--anchors", type=int, default=32, help="training blocks drawn per sequence (default 32)"
    )
    parser.add_argument(
        "--gamma",
        type=float,
        default=4.0,
        help="loss weight exp(−(j − 1)/gamma) of block position j (default 4)",
    )
    parser.add_argument(
        "--init", default=None, help="continue this trained drafter (embedded, dir, hub id)"
    )
    return parser


def request_from_args(args: argparse.Namespace) -> DFlashRequest:
    """The parsed command line as a checked `DFlashRequest` (refused before a model loads)."""
    from specdec_core.training.dflash import DFlashRequest

    return DFlashRequest(
        layers=args.layers,
        block_size=args.block_size,
        draft_vocab=args.draft_vocab,
        anchors=args.anchors,
        gamma=args.gamma,
        init=args.init or None,
        **training_fields(args),
    )


def run(args: argparse.Namespace) -> int:
    from specdec_core.training.dflash import train_dflash

    request = request_from_args(args)
    keys = ("kind", "tokens", "epochs", "validation", "validation_by_kind")
    checkpoint = Path(request.out) / "checkpoint.pt"
    return run_training(
        train_dflash, request, checkpoint, keys, always=("teacher_forced_top1_by_position",)
    )
