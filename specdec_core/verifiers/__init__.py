"""Verification policies, chosen by name from `VERIFIERS`.

`lossless` is the default and the only exact one. The lossy policies (one module each, the rule
and its `--policy-param` names in the module docstring) trade fidelity for acceptance:
`threshold`, `cosine`, `typical`, `ngram`, `hybrid`, `ensemble`, `fly`. Every policy also
verifies trees (`verifiers/tree.py`: the lossless rule's recursive rejection sampling, a lossy
policy path by path).
"""

from __future__ import annotations

from specdec_core.errors import SpecdecError
from specdec_core.verifiers.base import ChainVerifier, Verdict
from specdec_core.verifiers.cosine import CosineVerifier
from specdec_core.verifiers.ensemble import EnsembleVerifier
from specdec_core.verifiers.fly import FlyVerifier
from specdec_core.verifiers.hybrid import HybridVerifier
from specdec_core.verifiers.lossless import LosslessVerifier, speculative_accept
from specdec_core.verifiers.ngram import NgramVerifier
from specdec_core.verifiers.threshold import ThresholdVerifier
from specdec_core.verifiers.typical import TypicalVerifier

VERIFIERS: dict[str, type[ChainVerifier]] = {
    "lossless": LosslessVerifier,
    "threshold": ThresholdVerifier,
    "cosine": CosineVerifier,
    "typical": TypicalVerifier,
    "ngram": NgramVerifier,
    "hybrid": HybridVerifier,
    "ensemble": EnsembleVerifier,
    "fly": FlyVerifier,
}


def make_verifier(name: str, **params: float) -> ChainVerifier:
    try:
        factory = VERIFIERS[name]
    except KeyError:
        raise SpecdecError(
            f"unknown policy '{name}'; choose one of: {', '.join(VERIFIERS)}"
        ) from None
    if params and not factory.PARAMS:
        raise SpecdecError(f"policy '{name}' takes no parameters (got {', '.join(params)})")
    return factory(**params)


def policy_params(name: str) -> dict[str, float]:
    """A policy's parameter names (`--policy-param NAME=VALUE`) and their defaults."""
    return dict(VERIFIERS[name].PARAMS)


def describe_policies() -> str:
    """One line per policy for `--help`: name, its parameters with defaults, lossy or not."""
    lines = []
    for name in VERIFIERS:
        params = ", ".join(f"{key}={value:g}" for key, value in policy_params(name).items())
        lossy = " (lossy)" if make_verifier(name).lossy else ""
        lines.append(f"{name}{lossy}" + (f": {params}" if params else ""))
    return "; ".join(lines)


__all__ = [
    "VERIFIERS",
    "ChainVerifier",
    "Verdict",
    "describe_policies",
    "make_verifier",
    "policy_params",
    "speculative_accept",
]
