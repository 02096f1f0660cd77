"""`specdec train mlp-speculator`: its command line (the training is in
specdec_core/training/mlp_speculator.py). `add_parser(subparsers)` declares the subcommand on
`specdec train`'s subparsers; `run(args)` trains and prints the card's summary as JSON."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from specdec_core.cli.training_options import add_training_options, run_training, training_fields

if TYPE_CHECKING:
    from specdec_core.training.mlp_speculator import SpeculatorRequest


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "mlp-speculator",
        help="train an MLP speculator (IBM fms-extras, as vLLM loads it) on the target's "
        "hidden states",
    )
    parser.set_defaults(handler=run, invocation=None)
    add_training_options(
        parser,
        batch_tokens=2048,
        data_help="sharegpt, self, self-long, magpie, FILE.jsonl, FILE.npz or a `specdec data` "
        "job folder (as `specdec train eagle`); comma-separated to combine",
    )
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
        "vocabulary-sized embedding and head, so this sets most of the size. At the target's "
        "width a fresh speculator starts from the target's embedding, head and final norm; "
        "any other width starts random (fms-extras' initialisation) and trains every weight",
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
        "--train-vocab-tables",
        action="store_true",
        help="also train the embeddings and heads when they are the target's (a fresh "
        "speculator at the target's width, or an --init one whose tables are still the "
        "target's); by default those stay frozen and only the projections and norms train",
    )
    parser.add_argument(
        "--init", default=None, help="continue this trained speculator (embedded, dir, hub id)"
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
    from specdec_core.training.mlp_speculator import SpeculatorRequest

    return SpeculatorRequest(
        n_predict=args.n_predict,
        inner_dim=args.inner_dim,
        tie_weights=args.tie_weights,
        scale_input=args.scale_input,
        train_vocab_tables=args.train_vocab_tables,
        init=args.init or None,
        save_dtype=args.save_dtype,
        **training_fields(args),
    )


def run(args: argparse.Namespace) -> int:
    from specdec_core.training.mlp_speculator import train_speculator

    request = request_from_args(args)
    keys = ("kind", "tokens", "epochs", "validation", "validation_by_kind")
    checkpoint = Path(request.out) / "checkpoint.pt"
    return run_training(
        train_speculator, request, checkpoint, keys, always=("teacher_forced_top1_by_stage",)
    )
