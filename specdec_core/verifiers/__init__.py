"""Verification policies, chosen by name from `VERIFIERS`."""

from __future__ import annotations

from collections.abc import Callable

from specdec_core.errors import SpecdecError
from specdec_core.verifiers.base import ChainVerifier, Verdict
from specdec_core.verifiers.lossless import LosslessVerifier, speculative_accept

VERIFIERS: dict[str, Callable[..., ChainVerifier]] = {
    "lossless": LosslessVerifier,
}


def make_verifier(name: str, **params: float) -> ChainVerifier:
    try:
        factory = VERIFIERS[name]
    except KeyError:
        raise SpecdecError(
            f"unknown policy '{name}'; choose one of: {', '.join(VERIFIERS)}"
        ) from None
    return factory(**params)


__all__ = ["VERIFIERS", "ChainVerifier", "Verdict", "make_verifier", "speculative_accept"]
