"""`specdec`: the headless interface. Benchmarks depend on it; keep it stable
(the contract: `docs/architecture.md`).

One module per command, each exposing `register(subparsers)`, which declares the command's
flags (the shared ones from `options`) and its handler; handlers turn the parsed flags into
typed values before calling the engine. Bad input raises `SpecdecError`, printed as one line on
stderr with exit code 2.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

from specdec_core.cli import (
    bench,
    data,
    export,
    generate,
    methods,
    serve_check,
    sweep,
    train,
    train_dflash,
    train_mlp_speculator,
    tune_policy,
    validate,
    watch,
)
from specdec_core.environment import command_line
from specdec_core.errors import SpecdecError, is_out_of_memory, out_of_memory

COMMANDS = (
    generate,
    bench,
    sweep,
    tune_policy,
    export,
    serve_check,
    train,
    validate,
    data,
    watch,
    methods,
)


def interruptible() -> None:
    """Let SIGINT (Ctrl+C, the Train tab's Stop) interrupt every command, even where it was
    started with SIGINT ignored: a shell starts background commands that way, and Python then
    keeps ignoring it, so a job could not be stopped. Only the main thread can set it."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specdec", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.register(sub)
    return parser


# trainers with flags of their own: `specdec train NAME`
OWN_TRAINERS = {"mlp-speculator": train_mlp_speculator, "dflash": train_dflash}


def parse(argv: list[str]) -> argparse.Namespace:
    """The command's flags; `train mlp-speculator` and `train dflash` have flags of their own
    (other trainers)."""
    if argv[:1] == ["train"] and argv[1:2] and argv[1] in OWN_TRAINERS:
        parser = argparse.ArgumentParser(prog="specdec train")
        OWN_TRAINERS[argv[1]].add_parser(parser.add_subparsers(dest="kind", required=True))
        args = parser.parse_args(argv[1:])
        args.command = "train"
        return args
    return build_parser().parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    interruptible()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse(argv)
    args.invocation = command_line(argv)  # as typed, for the files a run writes
    try:
        return args.handler(args)
    except SpecdecError as error:
        print(f"specdec: error: {error}", file=sys.stderr)
        return 2
    except Exception as error:
        if not is_out_of_memory(error):
            raise
        print(f"specdec: error: {out_of_memory(f'during `{args.command}`')}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("specdec: interrupted", file=sys.stderr)
        return 130
