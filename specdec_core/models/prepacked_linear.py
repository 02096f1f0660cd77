"""Prepacked linear layers for CPU inference: oneDNN weights reordered once, at load time.

On a CPU, `torch.nn.functional.linear` hands each call to a BLAS GEMM that repacks the weight
for every call with more than one input row. A forward over a few tokens (what speculative
decoding verifies) then reads every weight matrix about twice, so a forward over two tokens
costs far more than one over a single token. oneDNN can
reorder a weight once into the blocked layout its matrix kernel reads for a given number of
input rows (`torch.ops.mkldnn._reorder_linear_weight`, the packing torch.compile uses on a
CPU) and multiply dense inputs against that copy (`_linear_pointwise`). Tuned for a few rows
(`BATCH_HINT`), a forward over a few tokens costs little more than one over a single token
(measured: docs/benchmarks.md#step-costs-on-the-cpu). Every method gains, speculative ones
most, because verifying k tokens then costs little more than one token.

`prepack(model)` swaps each `nn.Linear` for a `PrepackedLinear` that keeps the original
`weight` and `bias` parameters (state dicts, tied embeddings and readers of `.weight` see no
change) plus the packed copy, used only where it is exact to use it: CPU, the packed dtype,
no autograd (training falls back to `F.linear`). The copy is made when the layer is, and made
again at the three moments weights change: `load_state_dict` (how a head is loaded and how
online adaptation publishes its weights), `.to()` / `.float()` and the like, and `eval()`
(`train()` drops it: a model that trains runs `F.linear`). Nothing is checked per call, so
code that changes weights in place outside those calls (`weight.mul_`, `weight.data = ...`)
calls `eval()` afterwards. The packed copy costs one more copy of the linear weights in
memory. Set SPECDEC_PREPACK=0 to keep torch's default kernels.
"""

from __future__ import annotations

import copy
import functools
import os

import torch
from torch import nn
from torch.nn import functional as F

BATCH_HINT = 4  # input rows the blocked layout is tuned for (decode steps verify 1-16 tokens)


@functools.cache
def _has_ops() -> bool:
    """Does this torch build have oneDNN's weight reorder and linear ops?"""
    try:
        return bool(torch.ops.mkldnn._reorder_linear_weight and torch.ops.mkldnn._linear_pointwise)
    except (AttributeError, RuntimeError):
        return False


@functools.cache
def native_bf16() -> bool:
    """Does this CPU multiply bf16 natively (AVX-512 BF16, AMX) through oneDNN?"""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def enabled(device: torch.device, dtype: torch.dtype) -> bool:
    """Prepack on this device and dtype? CPU, oneDNN built in, not switched off, and float32,
    or bfloat16 where the CPU multiplies it natively (elsewhere bf16 stays on torch's path)."""
    return (
        device.type == "cpu"
        and (dtype == torch.float32 or (dtype == torch.bfloat16 and native_bf16()))
        and torch.backends.mkldnn.is_available()
        and _has_ops()
        and os.environ.get("SPECDEC_PREPACK", "1") != "0"
    )


def fast_bf16(device: torch.device) -> bool:
    """Are prepacked bf16 linears available here (about twice as fast as float32 ones)?"""
    return enabled(device, torch.bfloat16)


def prepack(model: nn.Module) -> int:
    """Replace every `nn.Linear` in `model` whose weights allow it; returns how many. A linear
    held in several places (a tied MLP speculator's head, shared by its stages) becomes one
    `PrepackedLinear` in all of them."""
    swapped: dict[int, PrepackedLinear] = {}
    for module in list(model.modules()):
        # every slot, shared ones included (named_children lists a shared module once)
        for name, child in list(module._modules.items()):
            if isinstance(child, nn.Linear) and enabled(child.weight.device, child.weight.dtype):
                if id(child) not in swapped:
                    swapped[id(child)] = PrepackedLinear(child)
                setattr(module, name, swapped[id(child)])
    return len(swapped)


class PackedWeight:
    """x -> x @ weight.T (+ bias) against a oneDNN copy of `weight`, where that is exact.

    Not a module: it holds references, never parameters of its own, so it can sit on a
    module (the EAGLE head's reduced-vocabulary rows) without entering its state dict. The
    copy is made once, here: whoever changes the weights makes a new one.
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        self.weight, self.bias = weight, bias
        self.packed = None
        if enabled(weight.device, weight.dtype):
            self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), BATCH_HINT)

    def __deepcopy__(self, memo: dict) -> PackedWeight:
        """A copy packed from copies of the weights (oneDNN's blocked tensors cannot be copied;
        `memo` keeps a copied module's parameters shared with its copied packed weights)."""
        return PackedWeight(copy.deepcopy(self.weight, memo), copy.deepcopy(self.bias, memo))

    def runs_packed(self, x: torch.Tensor) -> bool:
        """Would `self(x)` multiply against the packed copy (not fall back to `F.linear`)?"""
        packed = self.packed
        return not (
            packed is None
            or torch.is_grad_enabled()
            or x.device.type != "cpu"
            or x.dtype != packed.dtype
        )

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if not self.runs_packed(x):
            return F.linear(x, self.weight, self.bias)
        rows = x.reshape(-1, x.shape[-1]).contiguous()
        bias = None if self.bias is None else self.bias.detach()
        out = torch.ops.mkldnn._linear_pointwise(rows, self.packed, bias, "none", [], "")
        return out.reshape(*x.shape[:-1], out.shape[-1])


class PrepackedLinear(nn.Module):
    """`nn.Linear` with a oneDNN copy of its weight for CPU inference, made again on
    `load_state_dict`, `.to()` and `eval()`, dropped on `train()` (module docstring)."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight
        self.bias = linear.bias
        self.training = linear.training
        self.packed: PackedWeight | None = PackedWeight(self.weight, self.bias)
        self.register_load_state_dict_post_hook(lambda module, _: module.repack())

    def repack(self) -> None:
        """Pack the current weights (after they changed)."""
        self.packed = PackedWeight(self.weight, self.bias)

    def train(self, mode: bool = True) -> PrepackedLinear:
        super().train(mode)
        if mode:
            self.packed = None
        else:
            self.repack()
        return self

    def _apply(self, fn, recurse=True):
        super()._apply(fn, recurse)
        if self.packed is not None:
            self.repack()
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        packed = self.packed
        if packed is None:
            return F.linear(x, self.weight, self.bias)
        return packed(x)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, oneDNN"
