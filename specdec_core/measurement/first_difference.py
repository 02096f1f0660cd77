"""Where a lossless method's output first differs from the reference, and whether that is a
float near-tie or a bug.

A lossless method's greedy output equals the target's in exact arithmetic. In half precision
(bf16, fp16) a forward over several tokens — what a verify computes — rounds differently from
the one-token forwards of autoregressive decoding, so where the target's top two logits are
almost equal the two can pick different tokens, and the texts part from there on. Anywhere
else a difference is a bug.

`first_difference(model, prompt, output, reference)` finds the first position where they part
and measures, with `model`, the target's logit margin there of the reference's token over the
run's token:

- `reference_gap`: in the last row of a forward over prompt + the shared prefix, as
  autoregressive decoding computes it;
- `run_gap`: in the same row of a forward over prompt + the whole run output, as a verify
  computes several rows at once.

It is a **float near-tie** when the reference margin is within `tolerance`, the rounding of a
logit of that size in the model's dtype (`NEAR_TIE_ULPS` units in the last place of the
larger logit: rounding accumulates over the layers), or when the two computations disagree on
which token is ahead; otherwise a **bug**. With a float32 model (`specdec bench --reference
fp32`) the margins are those of exact arithmetic, and `rounding` names the dtype the run
computed in (bf16, say), whose rounding is what may explain a difference.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from transformers import PreTrainedModel

from specdec_core.decoding.prefix_cache import common_prefix

NEAR_TIE_ULPS = 8
NEAR_TIE = "float near-tie"
BUG = "bug"


@dataclass(frozen=True)
class FirstDifference:
    position: int  # index in the new tokens
    reference_token: int
    run_token: int | None  # None: the run stopped where the reference went on
    reference_gap: float | None  # logit(reference token) - logit(run token), one-token path
    run_gap: float | None  # the same margin in a multi-row forward
    tolerance: float  # the dtype's rounding at this logit size
    dtype: str

    @property
    def label(self) -> str:
        if self.reference_gap is None or self.run_gap is None:
            return BUG  # one output ended early: not a rounding effect
        flipped = (self.reference_gap > 0) != (self.run_gap > 0)
        return NEAR_TIE if abs(self.reference_gap) <= self.tolerance or flipped else BUG

    def to_record(self) -> dict[str, Any]:
        return {**asdict(self), "label": self.label}


def tolerance(dtype: torch.dtype, logit: float) -> float:
    """`NEAR_TIE_ULPS` units in the last place of a logit of size |logit| in `dtype`."""
    return NEAR_TIE_ULPS * torch.finfo(dtype).eps * max(abs(logit), 1.0)


@torch.inference_mode()
def first_difference(
    model: PreTrainedModel,
    prompt_ids: Sequence[int],
    output: Sequence[int],
    reference: Sequence[int],
    rounding: torch.dtype | None = None,
) -> FirstDifference | None:
    """None when `output` equals `reference`; else where and by how much they part.
    `rounding`: the dtype whose rounding the tolerance is of (default: the model's)."""
    if list(output) == list(reference):
        return None
    position = common_prefix(output, reference)
    dtype = next(model.parameters()).dtype  # what the margins are measured in
    if position >= len(reference) or position >= len(output):  # one is a prefix of the other
        token = reference[position] if position < len(reference) else output[position]
        return FirstDifference(position, token, None, None, None, 0.0, _name(dtype))
    ref_token, run_token = reference[position], output[position]
    shared = [*prompt_ids, *reference[:position]]
    one = _logits(model, shared)[-1]  # [V]
    row = len(prompt_ids) - 1 + position  # the row that predicts output[position]
    many = _logits(model, [*prompt_ids, *output])[row]  # [V]
    reference_gap = float(one[ref_token] - one[run_token])
    run_gap = float(many[ref_token] - many[run_token])
    size = max(abs(float(one[ref_token])), abs(float(one[run_token])))
    return FirstDifference(
        position,
        ref_token,
        run_token,
        reference_gap,
        run_gap,
        tolerance(rounding or dtype, size),
        _name(dtype),
    )


def _logits(model: PreTrainedModel, ids: list[int]) -> torch.Tensor:
    tokens = torch.tensor([ids], device=model.device)  # [1, n]
    return model(input_ids=tokens, use_cache=False).logits[0].float()  # [n, V]


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
