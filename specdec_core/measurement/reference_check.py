"""A run's greedy output checked against `ar`'s: identical, or where the two part and how many
tokens agree before that (`specdec generate --reference`, `specdec bench --reference fp32`).

`ar` runs untimed with the run's own settings verified losslessly, either on the target itself
(the same dtype: what a lossless method must equal token for token) or on the target loaded
again in float32 (the model's own arithmetic: a bf16 or fp16 run, `ar` included, may part from
it at a float near-tie). Where the two part, `first_difference` measures the margin there with
the reference's model, against the rounding of the dtype the run computed in, so the check says
whether rounding explains it (float near-tie) or not.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from specdec_core.decoding.config import DecodeConfig
from specdec_core.measurement.first_difference import FirstDifference, first_difference
from specdec_core.models.loading import LoadedModel
from specdec_core.run.runner import run


@dataclass(frozen=True)
class ReferenceCheck:
    """The run's output against `ar`'s in `dtype`: `difference` is None when identical."""

    dtype: str  # the dtype the reference `ar` ran in
    output_tokens: int
    reference_tokens: int
    difference: FirstDifference | None

    @property
    def identical(self) -> bool:
        return self.difference is None

    @property
    def agreeing(self) -> int:
        """New tokens before the first difference (all of them when identical)."""
        return self.output_tokens if self.difference is None else self.difference.position

    def line(self, decode: Callable[[list[int]], str]) -> str:
        """'identical to float32 ar (96 tokens)', or where they part: the token each chose
        (`decode`: ids -> text), how many agree before it and whether rounding explains it."""
        name = f"{self.dtype} ar"
        if self.difference is None:
            return f"identical to {name} ({self.output_tokens} tokens)"
        d = self.difference
        head = f"differs from {name} at new token {d.position + 1}: {self.agreeing} of "
        head += f"{self.output_tokens} tokens agree before it"
        if d.run_token is None:
            longer = "ar" if self.reference_tokens > self.output_tokens else "this run"
            return f"{head}; {longer} goes on where the other stopped"
        margin = f"margin {d.reference_gap:.3g} (rounding {d.tolerance:.2g})"
        return (
            f"{head}; {name} chose {decode([d.reference_token])!r} (id {d.reference_token}), "
            f"this run {decode([d.run_token])!r} (id {d.run_token}); {d.label}, {margin}"
        )

    def to_record(self) -> dict[str, Any]:
        return {
            "dtype": self.dtype,
            "identical": self.identical,
            "agreeing_tokens": self.agreeing,
            "output_tokens": self.output_tokens,
            "reference_tokens": self.reference_tokens,
            "first_difference": self.difference.to_record() if self.difference else None,
        }


def reference_output(model: LoadedModel, ids: list[int], config: DecodeConfig) -> tuple[int, ...]:
    """`ar`'s output on `ids` in `model`'s arithmetic, with `config` verified losslessly."""
    return run(model, "ar", ids, config.lossless()).token_ids


def check(
    model: LoadedModel,
    ids: list[int],
    output: Sequence[int],
    reference: Sequence[int],
    rounding: torch.dtype | None = None,
) -> ReferenceCheck:
    """`output` against `reference` (`ar`'s output in `model`), a difference measured with
    `model`; `rounding`: the dtype the run computed in (its rounding may explain a difference
    from float32 `ar`; default: the model's)."""
    return ReferenceCheck(
        dtype=model.dtype_name,
        output_tokens=len(output),
        reference_tokens=len(reference),
        difference=first_difference(model.model, ids, output, reference, rounding),
    )
