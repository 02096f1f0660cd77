"""`specdec methods`: every method by family, what it needs and drafts, and its parameters."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "methods", help="list the methods by family: what each needs, drafts and takes"
    )
    parser.set_defaults(handler=run)


def listing() -> str:
    """The methods grouped by family, one line each, then its parameters with defaults."""
    from specdec_core.run.methods import FAMILIES, METHODS

    lines: list[str] = []
    for family in FAMILIES:
        members = [m for m in METHODS.values() if m.family == family]
        if not members:
            continue
        lines.append(f"{family}:")
        width = max(len(m.name) for m in members)
        for method in members:
            needs = f" [needs --{method.needs}]" if method.needs else ""
            lines.append(f"  {method.name:<{width}}  {method.summary}{needs}")
            for name, default in method.params:
                lines.append(f"  {'':<{width}}    --method-param {name}={default:g}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    print(listing())
    return 0
