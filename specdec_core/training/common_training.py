"""`EpochTraining`: the epochs of a small model trained on the target's features, resumable.

AdamW (0.9, 0.95, no weight decay) over shuffled length-grouped batches (loop.batches),
loop.py's warm-up and cosine schedule (over the epochs or the time budget, whichever ends
first), checkpoints in OUT/checkpoint.pt every `save_every` steps and after each epoch (a
rerun with the same OUT resumes at the step saved), `validate(model)` after each epoch and
`on_step(step, steps, steps_per_epoch, history)` after every optimiser step and validation
(loop.OnStep). A subclass gives the checkpoint's `kind`, the gradient-norm `clip` and
`batch_loss`, the loss of one batch.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import torch

from specdec_core.training.card import EpochRecord, Validation
from specdec_core.training.features import Featured
from specdec_core.training.loop import Checkpoint, OnStep, Schedule, batches
from specdec_core.training.train_config import TrainConfig

LOG_EVERY = 10  # batches between progress lines (the epoch's last batch is logged too)


class EpochTraining:
    kind: ClassVar[str]  # what the checkpoint holds (loop.Checkpoint)
    clip: ClassVar[float]  # the gradient norm each step is clipped to

    def __init__(
        self,
        model: torch.nn.Module,
        data: list[Featured],
        config: TrainConfig,
        out: Path,
        validate: Callable[[torch.nn.Module], Validation] | None = None,
        on_step: OnStep | None = None,
    ) -> None:
        self.model, self.data, self.config, self.validate = model, data, config, validate
        self.on_step = on_step
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            self.params, lr=config.lr, betas=(0.9, 0.95), weight_decay=0.0
        )
        self.generator = torch.Generator().manual_seed(config.seed)
        first = batches(data, config.batch_tokens, torch.Generator().manual_seed(0))
        self.steps_per_epoch = len(first)
        plan = {
            "sequences": len(data),
            "tokens": sum(len(item.ids) for item in data),
            "batch_tokens": config.batch_tokens,
        }
        self.checkpoint = Checkpoint(out, plan)
        resumed = self.checkpoint.resume(model, self.optimizer, self.generator)
        self.state = resumed or {"epoch": 0, "step": 0, "history": [], "plan": plan}
        self.epoch_start = self.generator.get_state()
        self.total = max(1, self.steps_per_epoch * config.epochs)
        self.schedule = Schedule(config, self.total, self.state.get("seconds", 0.0))

    def batch_loss(self, items: list[Featured]) -> tuple[torch.Tensor, str]:
        """One batch's loss to minimise, and what to say of it in the progress line."""
        raise NotImplementedError

    def run(self) -> list[EpochRecord]:
        state = self.state
        while state["epoch"] < self.config.epochs and not state.get("out_of_time"):
            self.epoch()
            self.end_epoch()
        return [EpochRecord.from_record(record) for record in state["history"]]

    def epoch(self) -> None:
        """The epoch's batches from where the state stands (mid-epoch after a resume)."""
        state, config = self.state, self.config
        self.epoch_start = self.generator.get_state()
        order = batches(self.data, config.batch_tokens, self.generator)
        done = state["step"] - state["epoch"] * self.steps_per_epoch
        self.model.train()
        for number, items in enumerate(order[done:], done + 1):
            if config.seconds and self.schedule.done(state["step"]) >= 1.0:
                state["out_of_time"] = True
                break
            for group in self.optimizer.param_groups:
                group["lr"] = self.schedule.rate(state["step"])
            loss, said = self.batch_loss(items)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.params, self.clip)
            self.optimizer.step()
            state["step"] += 1
            state["seconds"] = self.schedule.seconds()
            if number % LOG_EVERY == 0 or number == len(order):
                _log(
                    f"epoch {state['epoch'] + 1} batch {number}/{len(order)}: loss "
                    f"{float(loss.detach()):.3f}; {said}"
                )
            if state["step"] % config.save_every == 0:
                self.save()
            self.stepped()

    def end_epoch(self) -> None:
        """The epoch's record (a fraction of one where the time ran out), validated, printed
        as a JSON line and saved."""
        state = self.state
        stopped = "time" if state.get("out_of_time") else None
        if stopped:
            epoch = round(state["step"] / self.steps_per_epoch, 2)
        else:
            state["epoch"] += 1
            self.epoch_start = self.generator.get_state()
            epoch = state["epoch"]
        ended = time.time()
        self.model.eval()
        validation = self.validate(self.model) if self.validate is not None else Validation()
        record = EpochRecord(epoch, state["step"], ended, validation, stopped).to_record()
        state["history"].append(record)
        print(json.dumps(record), flush=True)
        self.save()
        self.stepped()

    def stepped(self) -> None:
        if self.on_step is not None:
            history = [EpochRecord.from_record(record) for record in self.state["history"]]
            self.on_step(self.state["step"], self.total, self.steps_per_epoch, history)

    def save(self) -> None:
        self.checkpoint.save(self.model, self.kind, self.optimizer, self.epoch_start, self.state)


def _log(message: str) -> None:
    print(f"[train] {message}", file=sys.stderr, flush=True)
