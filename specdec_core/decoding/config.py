"""Decoding settings shared by the CLI, the GUI and the benchmark."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from specdec_core.errors import SpecdecError

MAX_K = 64  # longest draft chain: beyond it a draft is mostly rejected work


def is_greedy(temperature: float) -> bool:
    """Is decoding at `temperature` greedy (the one-hot argmax)? The one place this is
    decided: the config, the loop, the distributions, the policies and the drafters all ask
    here (torch-free, like the rest of this module: the window's process reads it)."""
    return temperature <= 0.0


@dataclass(frozen=True)
class DecodeConfig:
    max_new_tokens: int = 128
    k: int = 4  # draft length for chain drafters
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    seed: int = 0
    policy: str = "lossless"
    policy_params: dict[str, float] = field(default_factory=dict)
    tree_depth: int | None = None
    tree_topk: int | None = None
    tree_tokens: int | None = None  # None = auto-size for the device
    ngram_max: int = 3
    k_schedule: str = "fixed"  # or "adaptive": k follows acceptance (loop/adaptive.py)
    # parameters of the method itself (an exit layer, a lookahead window), by name; each
    # method declares the ones it reads and their defaults (methods.py `Method.params`)
    method_params: dict[str, float] = field(default_factory=dict)

    def method_param(self, name: str, default: float) -> float:
        """Method parameter `name`, or the method's `default` where it is not set."""
        return self.method_params.get(name, default)

    def method_int(self, name: str, default: int, method: str) -> int:
        """`method_param` of a setting that counts something (a window, an exit layer): a
        whole number, or an error that names the `method` asking for it."""
        value = self.method_param(name, default)
        if value != int(value):
            raise SpecdecError(
                f"--method-param {name}={value:g}: {method} needs a whole number for {name}"
            )
        return int(value)

    @property
    def greedy(self) -> bool:
        return is_greedy(self.temperature)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def lossless(self) -> DecodeConfig:
        """The same settings verified losslessly: what an autoregressive reference runs."""
        return replace(self, policy="lossless", policy_params={})


def parse_params(items: Iterable[str], where: str) -> dict[str, float]:
    """Policy parameters written `NAME=NUMBER` (`--policy-param tau=0.3`, or the `/`-separated
    list of a bench entry `ngram:threshold:tau=0.3`) -> {name: value}; `where` names the flag
    or entry in the error."""
    params = {}
    for item in items:
        name, _, value = item.partition("=")
        try:
            params[name.strip()] = float(value)
        except ValueError:
            raise SpecdecError(f"{where} expects NAME=NUMBER (got '{item}')") from None
    return params
