"""What every training request shares: its data sources and their token budgets, its work
folder, and the checks of those settings made when a request is made (before a model loads).

`TrainingData` is the frozen, keyword-only base of the request dataclasses (`TrainRequest`,
`MedusaTrainRequest`, `SpeculatorRequest`): the fields every one has, with the defaults of
`specdec train`; a request adds its own and redeclares a default it changes.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from specdec_core.errors import SpecdecError
from specdec_core.training.data_sources import Collected, check_source, collect
from specdec_core.training.magpie import evaluation_prompts, prompt_files

if TYPE_CHECKING:
    from specdec_core.models.loading import LoadedModel


@dataclass(frozen=True, kw_only=True)
class TrainingData:
    """The settings of a training run's data, budget and checkpoints."""

    out: str  # the trained model and its card; the checkpoint too
    target: str = "embedded"  # the target model (name, folder or hub id)
    data: tuple[str, ...] = ("self",)  # sources (data_sources.py)
    tokens: tuple[int, ...] = (1_000_000,)  # token budget: one, or one per source
    epochs: int = 2
    work: str | None = None  # cache for generated data (default OUT/work)
    cached_only: bool = False  # self-distillation: only the answers already in `work`
    max_len: int = 512  # tokens per training sequence
    batch_tokens: int = 4096  # padded tokens per training batch
    lr: float = 1e-3
    seed: int = 0
    val_prompts: int = 4  # held-out prompts for tau after each epoch (0 = none)
    val_kinds: int = 3  # held-out prompts per kind for the table by kind (0 = none)
    device: str = "cpu"
    feature_dtype: str = "bfloat16"  # the target's dtype for data generation and features
    seconds: float | None = None  # one time budget, from the data to the end of training
    save_every: int = 100  # optimiser steps between checkpoints (one also ends each epoch)
    exclude_prompts: tuple[str, ...] = ()  # prompt files / globs generated prompts never match
    command: str | None = None  # the command line, recorded in the card

    def check_training_data(self) -> None:
        """Refuse, in one line saying what to give, settings no run could train with."""
        if not self.data:
            raise SpecdecError(
                "--data names no source; use sharegpt, self, self-long, magpie, FILE.jsonl, "
                "FILE.npz or a `specdec data` job folder"
            )
        for source in self.data:
            check_source(source)
        prompt_files(self.exclude_prompts)  # a pattern that matches no file is refused
        if len(self.tokens) not in (1, len(self.data)):
            raise SpecdecError(
                "--tokens takes one number, or one per --data source (comma-separated)"
            )
        if self.save_every < 1:
            raise SpecdecError(f"--save-every {self.save_every}: give 1 or more optimiser steps")
        if self.seconds is not None and self.seconds <= 0:
            raise SpecdecError(f"--seconds {self.seconds}: give a time budget above 0")
        if self.val_kinds < 0:
            raise SpecdecError(f"--val-kinds {self.val_kinds}: give 0 (none) or more")

    def target_dtype(self) -> str:
        """The dtype the target loads in: `feature_dtype`, but float32 where bfloat16 would be
        emulated (a CPU without AVX-512 BF16 / AMX multiplies it many times slower)."""
        if self.feature_dtype != "bfloat16" or self.device != "cpu":
            return self.feature_dtype
        from specdec_core.models.prepacked_linear import native_bf16

        if native_bf16():
            return self.feature_dtype
        print(
            "[train] this CPU emulates bfloat16 (many times slower than float32): features in "
            "float32",
            file=sys.stderr,
            flush=True,
        )
        return "float32"

    def load_target(self) -> LoadedModel:
        """The target in `target_dtype()`, torch's random state seeded with `seed` first."""
        import torch

        from specdec_core.models.loading import load_model

        torch.manual_seed(self.seed)
        return load_model(self.target, self.device, self.target_dtype())

    @property
    def budgets(self) -> tuple[int, ...]:
        """The token budget of each source."""
        return self.tokens * len(self.data) if len(self.tokens) == 1 else self.tokens

    @property
    def work_dir(self) -> Path:
        return Path(self.work) if self.work else Path(self.out) / "work"

    def collected(self, target: LoadedModel) -> Iterator[Collected]:
        """Each source's samples within its budget, collected one by one (lazily: a caller
        turns each into features before the next is collected)."""
        exclude = evaluation_prompts(self.exclude_prompts)
        for source, budget in zip(self.data, self.budgets, strict=True):
            yield collect(source, target, budget, self.work_dir, self.max_len, self.seed,
                          self.cached_only, exclude)  # fmt: skip
