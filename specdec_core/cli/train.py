"""`specdec train {eagle,draft,medusa,pard}`: its command line (the drivers are in
specdec_core/training: driver.py for eagle and draft, medusa.py for Medusa heads, pard.py for
a PARD parallel draft)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from specdec_core.cli.training_options import add_training_options, run_training, training_fields

if TYPE_CHECKING:
    from specdec_core.training.medusa import MedusaTrainRequest
    from specdec_core.training.pard import PardTrainRequest
    from specdec_core.training.request import TrainRequest


def register(sub: argparse._SubParsersAction) -> None:
    train = sub.add_parser(
        "train",
        help="train an EAGLE head, a token-level draft, Medusa heads, a PARD parallel draft or "
        "(`train mlp-speculator --help`) an MLP speculator",
    )
    train.set_defaults(handler=run, invocation=None)
    train.add_argument("kind", choices=["eagle", "draft", "medusa", "pard"])
    add_training_options(
        train,
        batch_tokens=4096,
        data_help="sharegpt, self (the target's own answers to ShareGPT prompts of up to 256 "
        "tokens), self-long (to the prompts of 257-1024 tokens), magpie (to prompts the target "
        "writes itself, for writing, coding, maths, extraction, role-play, summarisation and "
        "QA), FILE.jsonl, or FILE.npz (answers saved by scripts/gpu_distill.py); "
        "comma-separated to combine, e.g. self,magpie",
    )
    train.add_argument(
        "--init",
        default=None,
        help="eagle: start from this trained head (its weights and draft vocabulary), "
        "e.g. embedded, to continue it on new data with a fresh schedule. pard: adapt this "
        "draft model of the target's tokenizer (default: the target's first --layers layers)",
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
        "(default 1, Medusa-1). pard: the target's first layers the draft keeps (default 4)",
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
    train.add_argument(
        "--block",
        type=int,
        default=8,
        help="pard: tokens the draft learns to propose in one forward (PARD's para_num)",
    )
    train.add_argument(
        "--mask-token",
        type=int,
        default=None,
        help="pard: the id standing for a masked token (default: the tokenizer's highest "
        "special token that the data never holds)",
    )
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
    train.add_argument(
        "--progress-file",
        default=None,
        help="write the progress as JSON here, atomically, as training goes: epoch, step, "
        "steps, tokens_per_s, eta_s, validation (per epoch), finished",
    )


def request_from_args(args: argparse.Namespace) -> TrainRequest:
    """The parsed `specdec train` command line as a `TrainRequest` (checked: refused here, before
    any model loads, if it cannot work)."""
    from specdec_core.training.request import TrainRequest

    return TrainRequest(
        trains=args.kind,
        init=args.init or None,
        arch=args.arch,
        layers=args.layers,
        draft_vocab=args.draft_vocab,
        unroll=args.unroll,
        noise=args.noise,
        input_norms=args.input_norms,
        ce_weight=args.ce_weight,
        progress_file=args.progress_file,
        **training_fields(args),
    )


def medusa_request_from_args(args: argparse.Namespace) -> MedusaTrainRequest:
    """The parsed `specdec train medusa` command line as a `MedusaTrainRequest` (checked before
    any model loads); a flag that only an EAGLE head takes is refused."""
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
    return MedusaTrainRequest(
        heads=args.heads,
        layers=args.layers if args.layers is not None else 1,
        lm_head=args.lm_head,
        draft_vocab=args.draft_vocab,
        progress_file=args.progress_file,
        **training_fields(args),
    )


def pard_request_from_args(args: argparse.Namespace) -> PardTrainRequest:
    """The parsed `specdec train pard` command line as a `PardTrainRequest` (checked before any
    model loads); a flag of EAGLE heads is refused."""
    from specdec_core.errors import SpecdecError
    from specdec_core.training.pard import PardTrainRequest

    for flag, value in (("--arch", args.arch), ("--noise", args.noise), ("--ce-weight",
                        args.ce_weight), ("--draft-vocab", args.draft_vocab)):  # fmt: skip
        if value is not None:
            raise SpecdecError(f"{flag} belongs to EAGLE heads; drop it for `specdec train pard`")
    fields = training_fields(args)
    return PardTrainRequest(
        out=args.out,
        data=",".join(fields["data"]),
        target=args.target,
        init=args.init or None,
        layers=args.layers if args.layers is not None else 4,
        block=args.block,
        mask_token=args.mask_token,
        tokens=fields["tokens"][0],
        epochs=args.epochs,
        lr=args.lr,
        batch_tokens=args.batch_tokens,
        max_len=args.max_len,
        seed=args.seed,
        seconds=args.seconds,
        device=args.device,
        command=fields["command"],
    )


def run(args: argparse.Namespace) -> int:
    keys = ("kind", "tokens", "epochs", "validation", "validation_by_kind")
    if args.kind == "pard":
        from specdec_core.training.pard import train_pard

        request = pard_request_from_args(args)
        keys = ("kind", "mask_token", "steps", "top1_before", "top1_by_position")
        return run_training(train_pard, request, Path(request.out) / "checkpoint.pt", keys)
    if args.kind == "medusa":
        from specdec_core.training.medusa import train_medusa

        medusa = medusa_request_from_args(args)
        checkpoint = Path(medusa.out) / "checkpoint.pt"
        return run_training(train_medusa, medusa, checkpoint, (*keys, "medusa"))
    from specdec_core.training.driver import train_from_request

    request = request_from_args(args)
    checkpoint = request.checkpoint_dir / "checkpoint.pt"
    return run_training(train_from_request, request, checkpoint, keys)
