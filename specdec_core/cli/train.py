"""`specdec train eagle|draft`: train an EAGLE head or a token-level draft."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    from specdec_core.eagle.cli_train import add_parsers

    handlers = add_parsers(sub)
    sub.choices["train"].set_defaults(handler=handlers["train"])
