"""The flags every `specdec train` command shares, declared once, and what they become.

- `add_training_options`: the data, budget, schedule, checkpoint and validation flags of
  `specdec train {eagle,draft,medusa}` and `specdec train mlp-speculator`.
- `training_fields`: those flags as the keyword arguments every training request takes.
- `add_device_options`: `--device` and the target's dtype (training and `specdec validate`).
- `run_training`: train, print the card's summary as JSON; on Ctrl+C say how to resume.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from specdec_core.cli.options import add_exclude_prompts, parse_tokens

if TYPE_CHECKING:
    from specdec_core.training.card import ModelCard

Request = TypeVar("Request")
DEVICES = ["auto", "cpu", "cuda", "mps"]
DTYPES = ["auto", "float32", "float16", "bfloat16"]
# the flags whose parsed value a training request takes as it is, under the same name
AS_GIVEN = (
    "out", "target", "epochs", "work", "cached_only", "max_len", "batch_tokens", "lr", "seed",
    "val_prompts", "val_kinds", "device", "feature_dtype", "seconds", "save_every",
)  # fmt: skip


def add_device_options(
    parser: argparse.ArgumentParser, *, device: str, dtype_flag: str, dtype_help: str
) -> None:
    """`--device` (default `device`) and the target's dtype as `dtype_flag` (default bfloat16)."""
    parser.add_argument("--device", default=device, choices=DEVICES)
    parser.add_argument(dtype_flag, default="bfloat16", choices=DTYPES, help=dtype_help)


def add_training_options(
    parser: argparse.ArgumentParser, *, data_help: str, batch_tokens: int
) -> None:
    """The flags every training command takes (`--init` and the model's shape are its own)."""
    parser.add_argument("--target", default="embedded", help="embedded, hub id, dir or .gguf")
    parser.add_argument("--data", default="self", help=data_help)
    add_exclude_prompts(parser, "a prompt --data magpie writes")
    parser.add_argument(
        "--tokens", default="1000000", help="token budget (one, or one per --data source)"
    )
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--out", required=True, help="output directory (also resumes from it)")
    parser.add_argument("--work", default=None, help="cache for generated data (OUT/work)")
    parser.add_argument(
        "--cached-only",
        action="store_true",
        help="self-distillation: use only the answers already generated in --work",
    )
    parser.add_argument("--max-len", type=int, default=512, help="tokens per training sequence")
    parser.add_argument("--batch-tokens", type=int, default=batch_tokens)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--seconds",
        type=float,
        default=None,
        help="one time budget for the whole run (data, training, validation), in "
        "seconds; the schedule decays over whichever ends first, the epochs or the time",
    )
    parser.add_argument(
        "--save-every",
        type=int,
        default=100,
        help="optimiser steps between checkpoints in --out (the model, its optimiser and the "
        "data position; one also ends each epoch); an interrupted run given the same command "
        "resumes from its last checkpoint",
    )
    parser.add_argument("--val-prompts", type=int, default=4, help="held-out prompts for tau")
    parser.add_argument(
        "--val-kinds",
        type=int,
        default=3,
        help="held-out prompts per kind for the card's validation_by_kind table (top-1 and tau "
        "per kind, after training; 0 = none)",
    )
    add_device_options(
        parser,
        device="cpu",
        dtype_flag="--feature-dtype",
        dtype_help="target dtype for data generation and the features computed as training "
        "goes (bfloat16, the default, where the CPU multiplies it natively: ~2x faster; "
        "float32 elsewhere)",
    )


def training_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The flags of `add_training_options` as the keyword arguments of a training request."""
    from specdec_core.environment import command_line

    per_source = ", or one per --data source (comma-separated)"
    given = vars(args)
    return {
        **{name: given[name] for name in AS_GIVEN},
        "data": _names(args.data),
        "tokens": tuple(parse_tokens(t, per_source) for t in str(args.tokens).split(",")),
        "exclude_prompts": _names(args.exclude_prompts),
        "command": args.invocation or command_line(),
    }


def run_training(
    train: Callable[[Request], ModelCard],
    request: Request,
    checkpoint: Path,
    keys: tuple[str, ...],
    always: tuple[str, ...] = (),
) -> int:
    """Train `request`; print the card's `keys` it has (and `always`, null when absent) as one
    JSON object. Interrupted: say whether `checkpoint` lets the same command resume; exit 130."""
    try:
        card = train(request)
    except KeyboardInterrupt:
        where = (
            f"run the same command again to resume from {checkpoint}"
            if checkpoint.is_file()
            else "no checkpoint was written yet; run the same command again to start over"
        )
        print(f"specdec: training interrupted; {where}", file=sys.stderr)
        return 130
    record = card.to_record()
    summary = {k: record[k] for k in keys if k in record}
    summary.update({k: record.get(k) for k in always})
    print(json.dumps(summary))
    return 0


def _names(text: str) -> tuple[str, ...]:
    return tuple(s.strip() for s in text.split(",") if s.strip())
