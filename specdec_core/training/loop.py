"""The training loop of an EAGLE head or a token-level draft: `train` runs the epochs of
common_training.EpochTraining (batches, schedule, time budget, resumable checkpoints,
validation, progress) with `train_step`s of an `Objective`.

A step runs under bf16 autocast where bf16 is native (CUDA, a CPU with AVX-512 BF16 / AMX;
elsewhere torch emulates it many times slower than float32, so the step stays in float32),
clips the gradient norm to 0.5 and weighs the cross-entropy by `ce_weight`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from specdec_core.models.loading import LoadedModel
from specdec_core.training.card import EpochRecord, Validation
from specdec_core.training.common_training import EpochTraining, OnStep, OnTick
from specdec_core.training.objective import Objective
from specdec_core.training.online_features import FeatureBatch, Sequences
from specdec_core.training.starting_model import trainable
from specdec_core.training.train_config import TrainConfig

# `validate(objective)` -> the validation the epoch's record holds
Validate = Callable[[Objective], Validation]


def autocast_dtype(device: torch.device) -> torch.dtype | None:
    """bf16 where it is native (CUDA, a CPU with AVX-512 BF16 / AMX), else None (float32)."""
    if device.type == "cuda":
        return torch.bfloat16
    if device.type == "cpu":
        from specdec_core.models.prepacked_linear import native_bf16

        return torch.bfloat16 if native_bf16() else None
    return None


AUTO = "auto"


def train_step(
    objective: Objective,
    batch: FeatureBatch,
    optimizer,
    params,
    ce_weight: float,
    autocast=AUTO,
):
    """One optimiser step on a batch -> (feature loss, ce, top-1 agreement), under `autocast`
    (a dtype, None for float32; default `autocast_dtype` of the device)."""
    device = objective.lm_rows.device  # the target's device
    dtype = autocast_dtype(device) if autocast == AUTO else autocast
    with torch.autocast(device.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
        pred, true = objective.on(batch)
        feature, ce, agree = objective.losses(pred.float(), true.float())
    optimizer.zero_grad(set_to_none=True)
    (feature + ce_weight * ce).backward()
    torch.nn.utils.clip_grad_norm_(params, 0.5)
    optimizer.step()
    return feature, ce, agree


def train(
    objective: Objective,
    target: LoadedModel,
    data: Sequences,
    layers: tuple[int, ...],
    config: TrainConfig,
    out: Path,
    validate: Validate | None = None,
    on_step: OnStep | None = None,
    on_tick: OnTick | None = None,
) -> list[EpochRecord]:
    """Run the epochs on `data` with `target`'s features (`layers`: the hidden states entering
    them too), resuming from OUT/checkpoint.pt; return the per-epoch history.
    `on_step(step, steps, steps_per_epoch, history)`, when given, is called after every
    optimiser step and after each epoch's validation; `on_tick(clock)` after every batch and
    every few seconds while one runs."""
    run = TrainingRun(objective, target, data, layers, config, out, validate, on_step, on_tick)
    return run.run()


class TrainingRun(EpochTraining):
    """One call of `train` (common_training.EpochTraining): its steps are `train_step`s of
    `objective`, whose model the checkpoint holds; only `trainable` parameters train."""

    def __init__(
        self,
        objective: Objective,
        target: LoadedModel,
        data: Sequences,
        layers: tuple[int, ...],
        config: TrainConfig,
        out: Path,
        validate: Validate | None,
        on_step: OnStep | None,
        on_tick: OnTick | None = None,
    ) -> None:
        self.objective, self.kind = objective, config.trains
        super().__init__(objective, target, data, layers, config, out, validate, on_step, on_tick)

    @property
    def saved(self) -> nn.Module:
        return self.objective.model

    def trained_parameters(self) -> list[nn.Parameter]:
        params = trainable(self.objective.model, self.config.trains)
        for p in self.objective.model.parameters():
            p.requires_grad_(False)
        for p in params:
            p.requires_grad_(True)
        return params

    def step(self, batch: FeatureBatch) -> str:
        feature, ce, agree = train_step(
            self.objective, batch, self.optimizer, self.params, self.config.ce_weight
        )
        return f"feature {feature.item():.3f}, ce {ce.item():.2f}, top-1 {agree.item():.2f}"
